"""``hatch-precompile`` / ``python -m hatch_precompile``: see and control what is precompiled.

    report TARGET        what a wheel, a project dir or an installed package ships
    verify PACKAGE       replay the workloads after load(); non-zero on any cache miss
    warm PACKAGE         build the caches here, into the per-user cache (--clear removes them)
    bake -o DIR WHEEL... precompile wheels any backend built: run the workload, add the artifacts
    merge -o DIR WHEEL.. one wheel with the artifact sets of wheels built on several machines
    snoop -- COMMAND     run a program: every graph it compiled, who owns it, what the artifacts missed
    disable/enable NAME  per-package switch in this environment's preferences file
    status [NAME...]     the preferences file, the switches in effect, the per-user cache

One module per command (``main_<command>.py``: ``configure(subparsers)``, ``run(args)``), each a
thin layer over the module that does the work. Every error of hatch-precompile's own carries its
exit status (errors.py): one line, here.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from hatch_precompile import __version__
from hatch_precompile.errors import PrecompileError
from hatch_precompile.protocol import EXIT_INTERRUPTED

COMMANDS = ("report", "verify", "warm", "bake", "merge", "snoop", "switch", "status")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="hatch-precompile", description="See and control what hatch-precompile "
                                  "precompiles.")
    top.add_argument("--version", action="version", version=f"hatch-precompile {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        import_module(f"hatch_precompile.tools.main_{name}").configure(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except PrecompileError as exc:
        print(f"hatch-precompile {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
