"""``hatch-precompile disable|enable NAME...``: the per-package switch in this environment's preferences file."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hatch_precompile.errors import UsageError
from hatch_precompile.protocol import EXIT_OK, PREFERENCES_VAR
from hatch_precompile.run import switch
from hatch_precompile.tools import arguments, preference_edits


def configure(subparsers: Any) -> None:
    for name in ("disable", "enable"):
        p = arguments.command(subparsers, name, f"{name} precompiled caches for packages in this environment", f"""
            Sets `enable = {'false' if name == 'disable' else 'true'}` in the package's table of this
            environment's preferences file (${PREFERENCES_VAR}, else <sys.prefix>/hatch-precompile.toml),
            read by the build hook and by load(); comments and layout stay as written. Names are
            normalised as pip does (sample_pkg, Sample.Pkg and sample-pkg are one name). PRECOMPILE and
            PRECOMPILE_<NAME> in the environment still beat the file: the command says so where they
            do.""", f"""
            hatch-precompile {name} mypkg
            hatch-precompile {name} mypkg other-pkg --json""")
        p.add_argument("packages", nargs="+", metavar="PACKAGE")
        p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    enabled = args.command == "enable"
    say = arguments.result(args)
    file = switch.path()
    for name in args.packages:
        if not preference_edits.is_valid_name(name):
            raise UsageError(f"{name!r} is not a valid package name")
    changed = []
    for name in args.packages:
        try:
            key, previous = preference_edits.set_enabled(file, name, enabled)
        except OSError as exc:
            raise UsageError(f"cannot write the preferences file {file}: {exc}; set {PREFERENCES_VAR} to a file you "
                             "can write") from None
        unchanged = " (unchanged)" if previous is enabled else ""
        say(f"{name}: [{key}] enable = {'true' if enabled else 'false'} in {file}{unchanged}")
        effective, why = arguments.enabled(name)
        if effective != enabled:
            say(f"{name}: note: {why} in the environment overrides the preferences file")
        changed.append({"name": name, "table": key, "enable": enabled, "unchanged": previous is enabled,
                        "effective": effective, "why": why})
    old_python = sys.version_info < (3, 11)
    if old_python:
        say("note: Python 3.10 has no tomllib: load() reads no preferences here (the build hook does)")
    if args.json:
        arguments.print_json({"preferences_file": str(file), "packages": changed, "load_reads_preferences": not old_python})
    return EXIT_OK
