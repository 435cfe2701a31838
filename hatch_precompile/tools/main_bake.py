"""``hatch-precompile bake WHEEL... [-o DIR]``: precompile wheels any backend built (tools/bake.py)."""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path
from typing import Any

from hatch_precompile.errors import UsageError
from hatch_precompile.protocol import CPU_TARGETS, DEVICES, DIRNAME, EXIT_OK, SETS_DIR
from hatch_precompile.tools import arguments


def configure(subparsers: Any) -> None:
    p = arguments.command(subparsers, "bake", "precompile wheels that any build backend made: run the workload, write "
                          "new wheels with the artifacts", """
        A wheel post-processor, as `auditwheel repair` is: each wheel (setuptools, scikit-build-core,
        meson-python, flit, maturin, hatchling without the hook, or a precompiled wheel, to add a set
        for another torch or machine) is unpacked privately, its workload runs in a child process with
        --python's torch, and a new wheel is written into OUT_DIR with the artifact set, the
        declaration, the platform tag the kernels allow and a new RECORD. The input is never written to.

        The workload is declared, first found wins: --workload (and --package); --project's
        [tool.hatch-precompile] table; ./pyproject.toml's table, when its project is the wheel's; the
        declaration a hook-built wheel carries. Needs the publishing tools: pip install
        'hatch-precompile[publish]'.""", """
        hatch-precompile bake dist/*.whl                       # into wheelhouse/
        hatch-precompile bake -o out dist/mypkg-1.0-py3-none-any.whl --python /opt/torch-2.14/bin/python
        hatch-precompile bake dist/*.whl --workload mypkg.precompile:workload --cpu-capabilities default,avx2
        hatch-precompile bake --json dist/*.whl                # what was written, as JSON""")
    p.add_argument("wheels", nargs="+", metavar="WHEEL", help="wheels to bake (never modified)")
    p.add_argument("-o", "--out", default=arguments.WHEELHOUSE, metavar="OUT_DIR",
                   help="where the baked wheels are written")
    arguments.add_workload_options(p, "--project's [tool.hatch-precompile], ./pyproject.toml's for the wheel's "
                                      "project, or the wheel's own declaration", timeout=None)
    p.add_argument("--package", help="the package that calls hatch_precompile.load (default: the workload's)")
    p.add_argument("--project", metavar="DIR_OR_SDIST", help="read [tool.hatch-precompile] from this project's "
                   "pyproject.toml")
    p.add_argument("--python", metavar="PYTHON", help="an interpreter with the torch to bake for (default: this one)")
    p.add_argument("--device", choices=DEVICES, help="where the workloads run (as the hook's option; default: the "
                   "declared one, else auto)")
    p.add_argument("--cpu-target", choices=CPU_TARGETS, help="portable or native kernels (as the hook's option; "
                   "default: the declared one, else portable)")
    p.add_argument("--cpu-capabilities", metavar="CAP,CAP", type=_capabilities,
                   help="one artifact set per ATEN_CPU_CAPABILITY (as the hook's option), e.g. default,avx2 "
                        "(default: the declared ones, else the machine's)")
    p.set_defaults(run=run)


def _capabilities(text: str) -> tuple[str, ...]:
    """The hook's own check of ``cpu-capabilities``, for the command line's spelling of it."""
    from hatch_precompile.builder import options

    return options.check_option("cpu-capabilities", text.split(","), "--cpu-capabilities")


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import bake

    workloads = tuple(arguments.checked(args))
    if args.cpu_capabilities is not None and not args.cpu_capabilities:
        raise UsageError("--cpu-capabilities names none")
    say = arguments.speaker(args)
    baked = []
    for wheel in args.wheels:
        written = bake.bake(Path(wheel), Path(args.out), python=args.python or sys.executable, say=say,
                            workloads=workloads, package=args.package,
                            project=Path(args.project) if args.project else None, timeout=args.timeout,
                            device=args.device, cpu_target=args.cpu_target, capabilities=args.cpu_capabilities or ())
        baked.append(described(Path(wheel), written))
        if arguments.quiet(args) and not args.json:  # the result, where bake's own line was not said
            arguments.say(str(written))
    if args.json:
        arguments.print_json({"wheels": baked})
    return EXIT_OK


def described(wheel: Path, written: Path) -> dict[str, Any]:
    """One wheel written, as --json gives it: where from, where to, its tag and artifact sets."""
    with zipfile.ZipFile(written) as archive:
        names = archive.namelist()
    sets = sorted({n.split(f"/{SETS_DIR}/", 1)[1].split("/", 1)[0] for n in names if f"/{DIRNAME}/{SETS_DIR}/" in n})
    return {"input": str(wheel), "output": str(written), "tag": written.name.removesuffix(".whl").split("-", 2)[2],
            "bytes": written.stat().st_size, "sets": sets}
