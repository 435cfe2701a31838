"""``hatch-precompile merge -o DIR WHEEL...``: one wheel with the artifact sets of several machines' wheels."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hatch_precompile.protocol import EXIT_OK
from hatch_precompile.tools import arguments


def configure(subparsers: Any) -> None:
    p = subparsers.add_parser("merge", help="one wheel with the artifact sets of wheels built on several machines")
    p.add_argument("wheels", nargs="+", metavar="WHEEL", help="wheels of one project and version")
    p.add_argument("-o", "--out", required=True, metavar="OUT_DIR", help="where the merged wheel is written")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import merge

    merged, sets = merge.merge([Path(w) for w in args.wheels], Path(args.out))
    arguments.say(f"merge: {merged}: {len(sets)} artifact set(s): {', '.join(sets)}")
    return EXIT_OK
