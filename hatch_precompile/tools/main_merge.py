"""``hatch-precompile merge WHEEL... [-o DIR]``: one wheel with the artifact sets of several machines' wheels."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hatch_precompile.protocol import EXIT_OK
from hatch_precompile.tools import arguments


def configure(subparsers: Any) -> None:
    p = arguments.command(subparsers, "merge", "one wheel with the artifact sets of wheels built on several machines",
                          """
        The wheels are one project's, version, Python and ABI, built (or baked) on different kinds of
        machine or torch; the merged wheel holds every artifact set, their files stored once, takes the
        least compatible platform tag of theirs and has a fresh RECORD. Wheels that differ outside their
        artifact sets, and sets whose files are missing or altered, are refused, naming the first
        difference.""", """
        hatch-precompile merge wheels-avx2/*.whl wheels-avx512/*.whl     # into wheelhouse/
        hatch-precompile merge -o dist/ a/mypkg-1.0-cp311-cp311-manylinux_2_28_x86_64.whl b/mypkg-1.0-cp311-cp311-manylinux_2_28_x86_64.whl
        hatch-precompile merge --json a/*.whl b/*.whl""")
    p.add_argument("wheels", nargs="+", metavar="WHEEL", help="wheels of one project and version")
    p.add_argument("-o", "--out", default=arguments.WHEELHOUSE, metavar="OUT_DIR", help="where the merged wheel is written")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import merge

    merged, sets = merge.merge([Path(w) for w in args.wheels], Path(args.out))
    arguments.result(args)(f"merge: {merged}: {len(sets)} artifact set(s): {', '.join(sets)}")
    if args.json:
        arguments.print_json({"inputs": args.wheels, "output": str(merged), "bytes": merged.stat().st_size,
                              "sets": sets})
    return EXIT_OK
