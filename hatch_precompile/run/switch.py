"""The on/off switch shared by the build hook and ``load()``.

Precedence: ``PRECOMPILE_<NAME>`` beats ``PRECOMPILE`` beats the preferences file of the
environment (``hatch-precompile disable/enable``, see preferences.py) beats the caller's default
(the pyproject ``enable`` option at build time, on at run time). Standard library only: this runs
before anything imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from hatch_precompile.errors import GateValueError, PreferencesError
from hatch_precompile.run import preferences, variables


def decide(
    name: str,
    default: bool,
    environ: Mapping[str, str] | None = None,
    *,
    aliases: Iterable[str] = (),
    build: bool = False,
) -> tuple[bool, str]:
    """Return (enabled, why) for the project or import package ``name``.

    ``aliases`` are further names the preferences file may use for the same package (the build
    hook passes the import package besides the project name); ``build`` lets the preferences
    lookup follow ``VIRTUAL_ENV`` out of an isolated build env (see preferences.candidates).
    """
    env = os.environ if environ is None else environ
    for var, raw in variables.switches(name, env):
        try:
            return variables.switch_value(var, raw), f"{var}={raw}"
        except ValueError as exc:
            raise GateValueError(str(exc)) from None
    try:
        preferred = preferences.lookup([name, *aliases], env, build=build)
    except PreferencesError as exc:
        raise GateValueError(str(exc)) from None
    if preferred is not None:
        return preferred
    return default, "default" if default else "enable = false"
