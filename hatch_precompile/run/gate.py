"""The on/off switch shared by the build hook and ``load()``.

Precedence: ``PRECOMPILE_<NAME>`` beats ``PRECOMPILE`` beats the preferences file of the
environment (``hatch-precompile disable/enable``, see preferences.py) beats the caller's default
(the pyproject ``enable`` option at build time, on at run time). Standard library only: this runs
before anything imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from hatch_precompile.errors import PrecompileError
from hatch_precompile.run import preferences, variables

OFF_VALUES = frozenset({"0", "false", "no", "off"})
ON_VALUES = frozenset({"1", "true", "yes", "on"})


class GateValueError(PrecompileError, ValueError):
    """An environment switch or the preferences file holds a value that is neither on nor off."""


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
        value = raw.lower()
        if value in OFF_VALUES:
            return False, f"{var}={raw}"
        if value in ON_VALUES:
            return True, f"{var}={raw}"
        raise GateValueError(
            f"{var}={raw!r} is not a valid switch value: use one of "
            f"{', '.join(sorted(ON_VALUES))} or {', '.join(sorted(OFF_VALUES))}"
        )
    try:
        preferred = preferences.lookup([name, *aliases], env, build=build)
    except preferences.PreferencesError as exc:
        raise GateValueError(str(exc)) from None
    if preferred is not None:
        return preferred
    return default, "default" if default else "enable = false"
