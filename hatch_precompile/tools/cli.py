"""``hatch-precompile`` / ``python -m hatch_precompile``: see and control what is precompiled.

    report TARGET            what a wheel, a project dir or an installed package ships
    verify PACKAGE           replay the workloads after load(); non-zero on any cache miss
    warm PACKAGE             build the caches here, into the per-user cache (--clear removes them)
    bake WHEEL... [-o DIR]   precompile wheels any backend built: run the workload, add the artifacts
    merge WHEEL... [-o DIR]  one wheel with the artifact sets of wheels built on several machines
    snoop -- COMMAND         run a program: every graph it compiled, who owns it, what the artifacts missed
    disable/enable NAME      per-package switch in this environment's preferences file
    status [NAME...]         the preferences file, the switches in effect, the per-user cache

One module per command (``main_<command>.py``: ``configure(subparsers)``, ``run(args)``), each a
thin layer over the module that does the work; each command has a description, examples, its
defaults shown, ``-v``/``-q`` and ``--json`` (tools/arguments.py). Every error of hatch-precompile's
own carries its exit status (errors.py): one line here, or under ``--json`` one JSON document on
stdout, with the same exit status.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from typing import NoReturn

from hatch_precompile import __version__
from hatch_precompile.errors import HatchPrecompileError, UsageError
from hatch_precompile.protocol import EXIT_INTERRUPTED, EXIT_USAGE
from hatch_precompile.tools import arguments

COMMANDS = ("report", "verify", "warm", "bake", "merge", "snoop", "switch", "status")
EXAMPLES = """\
examples:
  hatch-precompile report dist/mypkg-1.0-cp311-cp311-manylinux_2_28_x86_64.whl
  hatch-precompile verify mypkg --threads 1,8     # in the package's CI: exit 1 on any cache miss
  hatch-precompile snoop --trace trace -- python train.py
  hatch-precompile bake dist/*.whl                # into wheelhouse/
  hatch-precompile status --json

`hatch-precompile COMMAND --help` describes each command, with examples.
"""


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are a JSON document under ``--json`` too."""

    def error(self, message: str) -> NoReturn:
        ours = _argv[:_argv.index("--")] if "--" in _argv else _argv  # after --: snoop's program's
        if "--json" in ours:
            command = next((a for a in ours if a in (*COMMANDS, "disable", "enable") and a != "switch"), None)
            arguments.print_json(arguments.error_document(command, UsageError(f"{self.prog}: error: {message}"), EXIT_USAGE))
        super().error(message)


_argv: list[str] = []  # what main() parses, for Parser.error (argparse hands it only the message)


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="hatch-precompile", formatter_class=arguments.Formatter, epilog=EXAMPLES,
                 description="See and control what hatch-precompile precompiles: what a wheel ships, whether it "
                             "still serves this environment, what a program compiled, and the switches.")
    top.add_argument("--version", action="version", version=f"hatch-precompile {__version__}")
    arguments.output_options(top, top=True)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        import_module(f"hatch_precompile.tools.main_{name}").configure(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    _argv[:] = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    arguments.verbose(args)
    try:
        return int(args.run(args))
    except HatchPrecompileError as exc:
        return _failed(args, exc, exc.exit_code)
    except KeyboardInterrupt:
        return _failed(args, HatchPrecompileError("interrupted"), EXIT_INTERRUPTED)


def _failed(args: argparse.Namespace, exc: HatchPrecompileError, exit_code: int) -> int:
    """The error, one line on stderr; under ``--json`` also the document on stdout."""
    print(f"hatch-precompile {args.command}: {exc}", file=sys.stderr)
    if args.json:
        arguments.print_json(arguments.error_document(args.command, exc, exit_code))
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
