"""``hatch-precompile status [NAME...]``: the preferences file, the switches in effect, the per-user cache."""

from __future__ import annotations

import argparse
from typing import Any

from hatch_precompile.protocol import EXIT_OK, PREFERENCES_VAR
from hatch_precompile.run import preferences, usercache, variables
from hatch_precompile.tools import arguments

say = arguments.say


def configure(subparsers: Any) -> None:
    p = subparsers.add_parser("status", help="preferences file, switches in effect, per-user cache")
    p.add_argument("packages", nargs="*", metavar="PACKAGE", help="also show the decision for these")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import warm

    file = preferences.path()
    source = f"from {PREFERENCES_VAR}" if variables.preferences_file() else "sys.prefix"
    say(f"preferences file: {file} ({source}; {'exists' if file.is_file() else 'does not exist'})")
    if file.is_file():
        entries = preferences.read(file, build=True)  # tomlkit where tomllib is missing
        for key, value in entries.values():  # in file order
            say(f"  [{key}] enable = {'true' if value else 'false'}")
        if not entries:
            say("  (no package switches)")
    switches_set = variables.all_switches()
    say("environment switches: " + (", ".join(f"{k}={v}" for k, v in switches_set.items()) or "none"))
    say(f"per-user cache (hatch-precompile warm): {usercache.base_dir()}")
    for package, environments, size in warm.stored():
        say(f"  {package}: {environments} environment(s), {size / 1e6:.2f} MB")
    for name in args.packages:
        enabled, why = arguments.decide(name)
        say(f"{name}: {'on' if enabled else 'off'} ({why})")
    return EXIT_OK
