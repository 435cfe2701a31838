"""``hatch-precompile snoop -- COMMAND``: run a program; every graph it compiled, who owns it, what the
artifacts missed, and the calls each shipped step's route served."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from hatch_precompile.errors import UsageError
from hatch_precompile.protocol import EXIT_FOUND
from hatch_precompile.tools import arguments


def configure(subparsers: Any) -> None:
    p = subparsers.add_parser("snoop", help="run a program and report every graph it compiled, who owns it, and "
                              "what the shipped artifacts missed")
    p.add_argument("--tmin", type=float, default=0.0, metavar="SECONDS", help="leave out graphs compiled faster")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--out", metavar="FILE", help="also write the whole report as JSON to FILE")
    p.add_argument("--cache-dir", metavar="DIR", help="use this Inductor cache dir instead of an empty one")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                   help="python script.py ..., python -m module ..., python -c code, or a console script")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import snoop

    command = args.program[1:] if args.program[:1] == ["--"] else args.program
    if args.tmin < 0:
        raise UsageError("--tmin must be zero or more seconds")
    result = snoop.run(command, args.cache_dir, arguments.say_err if args.json else arguments.say)
    report = snoop.analyse(result, args.tmin, arguments.set_manifests)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(json.dumps(report, indent=1, default=str) if args.json else snoop.render(report), end="\n" if args.json else "")
    return report["exit_code"] if isinstance(report["exit_code"], int) else EXIT_FOUND
