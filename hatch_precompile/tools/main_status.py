"""``hatch-precompile status [NAME...]``: the installed packages that ship artifacts, the preferences
file, the switches in effect, the per-user cache."""

from __future__ import annotations

import argparse
from typing import Any

from hatch_precompile.protocol import EXIT_OK, PREFERENCES_VAR
from hatch_precompile.run import switch, variables
from hatch_precompile.run.sets import usercache
from hatch_precompile.tools import arguments


def configure(subparsers: Any) -> None:
    p = arguments.command(subparsers, "status", "installed packages with artifacts, preferences, switches, per-user cache",
                          f"""
        Each installed package that ships artifacts (found without importing it): whether one of its
        sets is valid in this environment (and why not), how many compiled functions it serves
        untraced (its own, and those its dependencies compile on its behalf), and whether loading is
        on for it. Then where this environment's preferences file is (${PREFERENCES_VAR}, else
        sys.prefix) and the per-package switches in it, the PRECOMPILE and PRECOMPILE_<NAME>
        variables set, what `warm` stored in the per-user cache, and for each PACKAGE given whether
        loading is on and which rule says so (PRECOMPILE_<NAME> > PRECOMPILE > the preferences file
        > on).""", """
        hatch-precompile status
        hatch-precompile status mypkg other-pkg
        hatch-precompile status --json""")
    p.add_argument("packages", nargs="*", metavar="PACKAGE", help="also show the decision for these")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import installed, warm

    say = arguments.result(args)
    shipping = installed.installed()
    say("installed packages that ship artifacts:" if shipping else "installed packages that ship artifacts: none")
    for found in shipping:
        say(f"  {found.line()}")
    file = switch.path()
    source = f"from {PREFERENCES_VAR}" if variables.preferences_file() else "sys.prefix"
    say(f"preferences file: {file} ({source}; {'exists' if file.is_file() else 'does not exist'})")
    entries = switch.read(file, build=True) if file.is_file() else {}  # tomlkit where tomllib is missing
    for key, value in entries.values():  # in file order
        say(f"  [{key}] enable = {'true' if value else 'false'}")
    if file.is_file() and not entries:
        say("  (no package switches)")
    switches_set = variables.all_switches()
    say("environment switches: " + (", ".join(f"{k}={v}" for k, v in switches_set.items()) or "none"))
    say(f"per-user cache (hatch-precompile warm): {usercache.base_dir()}")
    stored = warm.stored()
    for package, environments, size in stored:
        say(f"  {package}: {environments} environment(s), {size / 1e6:.2f} MB")
    decisions = [(name, *arguments.enabled(name)) for name in args.packages]
    for name, enabled, why in decisions:
        say(f"{name}: {'on' if enabled else 'off'} ({why})")
    if args.json:
        arguments.print_json({
            "installed": [found.as_json() for found in shipping],
            "preferences_file": {"path": str(file), "from": PREFERENCES_VAR if variables.preferences_file() else
                                 "sys.prefix", "exists": file.is_file(),
                                 "switches": {key: value for key, value in entries.values()}},
            "environment_switches": switches_set,
            "user_cache": {"directory": str(usercache.base_dir()),
                           "packages": [{"package": p, "environments": e, "bytes": b} for p, e, b in stored]},
            "packages": [{"name": name, "enabled": enabled, "why": why} for name, enabled, why in decisions],
        })
    return EXIT_OK
