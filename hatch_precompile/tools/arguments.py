"""What several commands share: how they are described and how they speak (``-v``, ``-q``,
``--json`` with its format version, an error as JSON), their ``--workload`` option, the manifests
of a package."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.errors import GateValueError, HatchPrecompileError, TargetNotFound, UsageError
from hatch_precompile.protocol import DEBUG_VAR, DEFAULT_TIMEOUT, WORKLOAD
from hatch_precompile.run import switch, variables

# The version of every command's --json document (its "format" key): a key removed or changed in
# meaning makes it 2; keys are added without.
JSON_FORMAT = 1
WHEELHOUSE = "wheelhouse"  # where bake and merge write, as auditwheel and cibuildwheel write theirs

Say = Callable[[str], None]


class Formatter(argparse.RawDescriptionHelpFormatter):
    """A command's description and examples as written, and each option's default where it has
    one (argparse.ArgumentDefaultsHelpFormatter's, leaving out the defaults that are no value)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if ("%(default)" in text or not action.option_strings or action.nargs == 0 or default is None  # a flag
                or default is False or default is argparse.SUPPRESS or isinstance(default, (list, tuple)) and not default):
            return text
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


def output_options(parser: argparse.ArgumentParser, top: bool = False) -> None:
    """``--json``, ``-v`` and ``-q``: before the command (``top``) or after it. After it they keep
    what was given before it (argparse lets a subcommand's defaults overwrite its parent's)."""
    default: Any = None if top else argparse.SUPPRESS
    group = parser.add_argument_group("output")
    group.add_argument("--json", action="store_true", default=False if top else argparse.SUPPRESS,
                       help=f"print one JSON document on stdout (its \"format\" is {JSON_FORMAT}), progress on "
                            "stderr; an error is a JSON document too, with the same exit status")
    group.add_argument("-v", "--verbose", action="count", default=0 if top else default,
                       help=f"say more: hatch-precompile's debug log ({DEBUG_VAR}=1), here and in every process it "
                            "starts")
    group.add_argument("-q", "--quiet", action="count", default=0 if top else default,
                       help="say less: no progress lines, only the result and errors")


def command(subparsers: Any, name: str, summary: str, description: str, examples: str) -> argparse.ArgumentParser:
    """A subcommand's parser: ``summary`` in the list of commands, ``description`` and ``examples``
    (one command a line, a ``#`` comment after it) in its ``--help``, defaults shown."""
    parser = subparsers.add_parser(
        name, help=summary, formatter_class=Formatter,
        description="\n\n".join(_paragraph(part) for part in [f"{summary[0].upper()}{summary[1:]}.",
                                                               *description.strip().split("\n\n")]),
        epilog="examples:\n" + textwrap.indent(textwrap.dedent(examples).strip(), "  "),
    )
    output_options(parser)
    return parser


def _paragraph(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), 88, break_on_hyphens=False, break_long_words=False)


def quiet(args: argparse.Namespace) -> bool:
    return getattr(args, "quiet", 0) > 0


def speaker(args: argparse.Namespace) -> Say:
    """How a command says its progress: on stdout, on stderr under ``--json`` (stdout is the
    document), not at all under ``-q``."""
    if quiet(args):
        return lambda message: None
    return say_err if getattr(args, "json", False) else say


def result(args: argparse.Namespace) -> Say:
    """How a command says its result in words: where progress goes, and under ``-q`` too; never
    under ``--json`` (the document says it)."""
    if getattr(args, "json", False):
        return lambda message: None
    return say


def say(message: str) -> None:
    print(message, flush=True)


def say_err(message: str) -> None:
    """For commands whose stdout is the report (``--json``): progress goes to stderr."""
    print(message, file=sys.stderr, flush=True)


def print_json(document: dict[str, Any]) -> None:
    """One command's --json document, its format version first."""
    print(json.dumps({"format": JSON_FORMAT, **document}, indent=1, default=str), flush=True)


def error_document(command: str | None, exc: BaseException, exit_code: int) -> dict[str, Any]:
    """What ``--json`` prints for an error: the command, the message as the text output words it,
    its kind and the exit status the command exits with."""
    kind = type(exc).__name__ if isinstance(exc, HatchPrecompileError) else "UsageError"
    return {"error": {"command": command, "kind": kind, "message": str(exc), "exit_code": exit_code}}


def verbose(args: argparse.Namespace) -> None:
    """``-v``: hatch-precompile's debug log here and, through the variable, in every child."""
    if getattr(args, "verbose", 0) > 0:
        os.environ[DEBUG_VAR] = "1"
        variables.debug_log()


def add_workload_options(parser: argparse.ArgumentParser, default: str, timeout: float | None = DEFAULT_TIMEOUT
                         ) -> None:
    parser.add_argument("--workload", action="append", metavar="MODULE:FUNCTION",
                        help=f"workload to run (repeatable; default: {default})")
    parser.add_argument("--timeout", type=float, default=timeout, metavar="SECONDS",
                        help="seconds for all workloads" + ("" if timeout is not None else
                                                             " (default: the declared timeout, else 1800)"))


def checked(args: argparse.Namespace) -> list[str]:
    """The ``--workload`` values, each of the form ``package.module:function``, and a positive ``--timeout``."""
    for spec in args.workload or []:
        if not WORKLOAD.fullmatch(spec):
            raise UsageError(f"--workload {spec!r} must look like 'package.module:function'")
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError("--timeout must be positive")
    return list(args.workload or [])


def workloads(args: argparse.Namespace) -> tuple[str, Path, list[str], str]:
    """(import name, package dir, workloads, where they were found) of ``args.package``."""
    from hatch_precompile.tools import command_targets

    return command_targets.workloads(args.package, checked(args) or None)


def set_manifests(package: str) -> list[Any]:
    """The sound manifests of ``package``'s artifact sets, shipped or warmed (none if not installed)."""
    from hatch_precompile.tools import command_targets

    try:
        return [a.manifest for a in command_targets.installed(package) if a.manifest is not None and a.problem is None]
    except TargetNotFound:
        return []


def enabled(name: str) -> tuple[bool, str]:
    """Whether loading is on for ``name`` here, and which switch says so (a bad value: off, why)."""
    try:
        return switch.enabled(name, True)
    except GateValueError as exc:
        return False, str(exc)
