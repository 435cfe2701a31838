"""``hatch-precompile disable|enable NAME...``: the per-package switch in this environment's preferences file."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hatch_precompile.errors import UsageError
from hatch_precompile.protocol import EXIT_OK, PREFERENCES_VAR
from hatch_precompile.run import preferences
from hatch_precompile.tools import arguments, preference_edits

say = arguments.say


def configure(subparsers: Any) -> None:
    for name in ("disable", "enable"):
        p = subparsers.add_parser(name, help=f"{name} precompiled caches for packages in this environment")
        p.add_argument("packages", nargs="+", metavar="PACKAGE")
        p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    enabled = args.command == "enable"
    file = preferences.path()
    for name in args.packages:
        if not preference_edits.is_valid_name(name):
            raise UsageError(f"{name!r} is not a valid package name")
    for name in args.packages:
        try:
            key, previous = preference_edits.set_enabled(file, name, enabled)
        except OSError as exc:
            raise UsageError(f"cannot write the preferences file {file}: {exc}; set {PREFERENCES_VAR} to a file you "
                             "can write") from None
        unchanged = " (unchanged)" if previous is enabled else ""
        say(f"{name}: [{key}] enable = {'true' if enabled else 'false'} in {file}{unchanged}")
        effective, why = arguments.decide(name)
        if effective != enabled:
            say(f"{name}: note: {why} in the environment overrides the preferences file")
    if sys.version_info < (3, 11):
        say("note: Python 3.10 has no tomllib: load() reads no preferences here (the build hook does)")
    return EXIT_OK
