"""What several commands share: how they speak, their ``--workload`` option, the manifests of a package."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hatch_precompile.errors import UsageError
from hatch_precompile.protocol import DEFAULT_TIMEOUT, WORKLOAD
from hatch_precompile.run import switch


def say(message: str) -> None:
    print(message, flush=True)


def say_err(message: str) -> None:
    """For commands whose stdout is the report (``--json``): progress goes to stderr."""
    print(message, file=sys.stderr, flush=True)


def add_workload_options(parser: argparse.ArgumentParser, default: str, timeout: float | None = DEFAULT_TIMEOUT
                         ) -> None:
    parser.add_argument("--workload", action="append", metavar="MODULE:FUNCTION",
                        help=f"workload to run (repeatable); default: {default}")
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds for all workloads")


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
    from hatch_precompile.tools import targets

    return targets.workloads(args.package, checked(args) or None)


def set_manifests(package: str) -> list[Any]:
    """The sound manifests of ``package``'s artifact sets, shipped or warmed (none if not installed)."""
    from hatch_precompile.tools import targets

    try:
        return [a.manifest for a in targets.installed(package) if a.manifest is not None and a.problem is None]
    except targets.TargetNotFound:
        return []


def decide(name: str) -> tuple[bool, str]:
    """Whether loading is on for ``name`` here, and which switch says so (a bad value: off, why)."""
    try:
        return switch.decide(name, True)
    except switch.GateValueError as exc:
        return False, str(exc)
