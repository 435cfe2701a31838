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
    p = arguments.command(subparsers, "snoop", "run a program and report every graph it compiled, who owns it, and "
                          "what the shipped artifacts missed", """
        SnoopCompile's @snoopi for PyTorch: the program runs unchanged in a child process with an
        empty private Inductor cache dir (so a graph served from a cache came from a package's
        artifacts) and observers installed before its first line. The report lists every graph,
        largest compile time first, with its owning distribution and whether a package's artifacts
        served it; each package's coverage; the workload gaps with a hint and why torch's key
        differs; and the pitfalls (graph breaks, recompiles, float64, restarted traces), each with
        its file:line and fix. --trace also keeps torch's own structured trace and renders it with
        tlparse (pip install tlparse) to an HTML page: every compile, its graph, its code, its
        breaks and recompile reasons. Exits with the program's exit status.""", """
        hatch-precompile snoop -- python train.py --epochs 1
        hatch-precompile snoop --trace trace -- python -m mypkg.serve   # then open trace/html/index.html
        hatch-precompile snoop --tmin 0.5 --json -- pytest tests/test_model.py > snoop.json""")
    p.add_argument("--tmin", type=float, default=0.0, metavar="SECONDS", help="leave out graphs compiled faster")
    p.add_argument("--out", metavar="FILE", help="also write the whole report as JSON to FILE")
    p.add_argument("--cache-dir", metavar="DIR", help="use this Inductor cache dir instead of an empty one")
    p.add_argument("--trace", metavar="DIR", type=Path,
                   help="write torch's structured trace (TORCH_TRACE) of the program into DIR and, where tlparse "
                        "is installed, its HTML report into DIR/html/index.html")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                   help="python script.py ..., python -m module ..., python -c code, or a console script")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import snoop

    command = args.program[1:] if args.program[:1] == ["--"] else args.program
    if args.tmin < 0:
        raise UsageError("--tmin must be zero or more seconds")
    result = snoop.run(command, args.cache_dir, arguments.speaker(args),
                       args.trace.absolute() if args.trace else None)
    report = snoop.analyse(result, args.tmin, arguments.set_manifests)
    if args.out:
        Path(args.out).write_text(json.dumps({"format": arguments.JSON_FORMAT, **report}, indent=1, default=str) + "\n")
    if args.json:
        arguments.print_json(report)
    else:
        print(snoop.render(report), end="")
    return report["exit_code"] if isinstance(report["exit_code"], int) else EXIT_FOUND
