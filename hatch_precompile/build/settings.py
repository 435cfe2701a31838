"""Everything a build is told, merged in one place: the hook's table, the environment, the preferences.

``load()`` turns hatch's table into Options (options.py), decides the switch (the ``PRECOMPILE``
variables beat the environment's preferences file, which beats the table's ``enable``:
run/switch.py) and reads the build's own variables (run/variables.py). Any of them wrong: one
OptionError naming the option, variable or file, before any workload runs. Backend-neutral.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hatch_precompile.build.options import OptionError, Options, parse
from hatch_precompile.run import switch, variables


@dataclasses.dataclass(frozen=True)
class Settings:
    options: Options
    enabled: bool
    why: str  # which switch decided: "default", "PRECOMPILE=0", "<file>: [pkg] enable = false", ...
    heartbeat: float  # seconds between a long workload's progress lines


def load(table: dict[str, Any], hook: str, project: str, environ: Mapping[str, str] | None = None) -> Settings:
    """The build's settings; raises OptionError naming what is wrong."""
    options = parse(table, hook)
    package = options.import_package
    try:
        enabled, why = switch.decide(project, options.enable, environ, aliases=[package] if package else [], build=True)
        heartbeat = variables.heartbeat(environ)
    except ValueError as exc:  # GateValueError included
        raise OptionError(f"build hook `{hook}`: {exc}") from None
    return Settings(options, enabled, why, heartbeat)
