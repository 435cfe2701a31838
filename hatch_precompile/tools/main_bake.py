"""``hatch-precompile bake -o DIR WHEEL...``: precompile wheels any backend built (tools/bake.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hatch_precompile.errors import UsageError
from hatch_precompile.protocol import CPU_TARGETS, DEVICES, EXIT_OK
from hatch_precompile.tools import arguments


def configure(subparsers: Any) -> None:
    p = subparsers.add_parser("bake", help="precompile wheels that any build backend made: run the workload, write "
                              "new wheels with the artifacts")
    p.add_argument("wheels", nargs="+", metavar="WHEEL", help="wheels to bake (never modified)")
    p.add_argument("-o", "--out", required=True, metavar="OUT_DIR", help="where the baked wheels are written")
    arguments.add_workload_options(p, "--project's [tool.hatch-precompile], ./pyproject.toml's for the wheel's "
                                      "project, or the wheel's own declaration", timeout=None)
    p.add_argument("--package", help="the package that calls hatch_precompile.load (default: the workload's)")
    p.add_argument("--project", metavar="DIR_OR_SDIST", help="read [tool.hatch-precompile] from this project's "
                   "pyproject.toml")
    p.add_argument("--python", metavar="PYTHON", help="an interpreter with the torch to bake for (default: this one)")
    p.add_argument("--device", choices=DEVICES, help="where the workloads run (as the hook's option)")
    p.add_argument("--cpu-target", choices=CPU_TARGETS, help="portable or native kernels (as the hook's option)")
    p.add_argument("--cpu-capabilities", metavar="CAP,CAP", type=_capabilities,
                   help="one artifact set per ATEN_CPU_CAPABILITY (as the hook's option), e.g. default,avx2")
    p.set_defaults(run=run)


def _capabilities(text: str) -> tuple[str, ...]:
    """The hook's own check of ``cpu-capabilities``, for the command line's spelling of it."""
    from hatch_precompile.build import options

    return options.check_option("cpu-capabilities", text.split(","), "--cpu-capabilities")


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import bake

    workloads = tuple(arguments.checked(args))
    if args.cpu_capabilities is not None and not args.cpu_capabilities:
        raise UsageError("--cpu-capabilities names none")
    for wheel in args.wheels:
        bake.bake(Path(wheel), Path(args.out), python=args.python or sys.executable, say=arguments.say,
                  workloads=workloads, package=args.package, project=Path(args.project) if args.project else None,
                  timeout=args.timeout, device=args.device, cpu_target=args.cpu_target,
                  capabilities=args.cpu_capabilities or ())
    return EXIT_OK
