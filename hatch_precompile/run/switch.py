"""The on/off switch shared by the build hook and ``load()``, and the preferences file it reads.

``enabled`` is the whole decision. Precedence: ``PRECOMPILE_<NAME>`` beats ``PRECOMPILE`` beats the
preferences file of the environment (``hatch-precompile disable/enable``) beats the caller's
default (the pyproject ``enable`` option at build time, on at run time). Standard library only:
this runs before anything imports torch.

The preferences file is the analog of Julia's ``LocalPreferences.toml``::

    # <sys.prefix>/hatch-precompile.toml
    [sample-pkg]
    enable = false

Where it is: ``$HATCH_PRECOMPILE_PREFERENCES`` if set, else ``<sys.prefix>/hatch-precompile.toml``.
pip's isolated build runs the backend with the user's own interpreter (measured: ``sys.prefix`` is
the user's venv, only ``sys.path`` points into ``/tmp/pip-build-env-*``), so that file is found
there too. ``python -m build`` makes a separate venv (``sys.prefix`` is ``/tmp/build-env-*``):
at build time only, when no file exists there and ``VIRTUAL_ENV`` names another environment
(the activated one the user ran ``build`` from), ``$VIRTUAL_ENV/hatch-precompile.toml`` is read
instead; otherwise the environment variable is the way.

Table names are package names, normalised as PEP 503 does (``packaging.utils.canonicalize_name``:
runs of ``-_.`` become ``-``, lower case), so ``[Sample_Pkg]`` names the import package
``sample_pkg`` and the project ``sample-pkg`` alike. Reading is on ``load()``'s path: standard
library ``tomllib`` only, and only if the file exists (on Python 3.10, which has no ``tomllib``,
there are no preferences at run time; the build hook falls back to ``tomlkit``). Editing is the
CLI's (tools/preference_edits.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from hatch_precompile.errors import GateValueError, PreferencesError
from hatch_precompile.protocol import canonical_name
from hatch_precompile.run import variables


def enabled(
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
    lookup follow ``VIRTUAL_ENV`` out of an isolated build env (see candidates).
    """
    env = os.environ if environ is None else environ
    for var, raw in variables.switches(name, env):
        try:
            return variables.switch_value(var, raw), f"{var}={raw}"
        except ValueError as exc:
            raise GateValueError(str(exc)) from None
    try:
        preferred = lookup([name, *aliases], env, build=build)
    except PreferencesError as exc:
        raise GateValueError(str(exc)) from None
    if preferred is not None:
        return preferred
    return default, "default" if default else "enable = false"


FILENAME = "hatch-precompile.toml"
KEY = "enable"


def path(environ: Mapping[str, str] | None = None) -> Path:
    """The file of this environment: the one the CLI edits."""
    explicit = variables.preferences_file(environ)
    return Path(explicit) if explicit else Path(sys.prefix) / FILENAME


def candidates(environ: Mapping[str, str] | None = None, build: bool = False) -> list[Path]:
    """Files to look at, in order; the first that exists is the one used."""
    found = [path(environ)]
    venv = variables.virtual_env(environ)
    if build and not variables.preferences_file(environ) and venv:
        # `python -m build` runs the backend in its own venv; the user's is still VIRTUAL_ENV.
        if os.path.realpath(venv) != os.path.realpath(sys.prefix):
            found.append(Path(venv) / FILENAME)
    return found


def read(file: Path, build: bool = False) -> dict[str, tuple[str, bool]]:
    """canonical name -> (table name as written, enable) for every table with an ``enable``."""
    try:
        data = _parse(file.read_bytes().decode("utf-8"), build)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # TOMLDecodeError is a ValueError
        raise PreferencesError(f"preferences file {file} cannot be read: {exc}") from None
    entries: dict[str, tuple[str, bool]] = {}
    for key, table in data.items():
        if not isinstance(table, dict):
            raise PreferencesError(
                f"preferences file {file}: `{key}` must be a table, e.g. [{canonical_name(key)}] "
                f"with {KEY} = true or false"
            )
        if KEY not in table:
            continue
        value = table[KEY]
        if not isinstance(value, bool):
            raise PreferencesError(
                f"preferences file {file}: [{key}] {KEY} must be true or false, got {value!r}"
            )
        name = canonical_name(key)
        if name in entries:
            raise PreferencesError(
                f"preferences file {file}: [{entries[name][0]}] and [{key}] both name package {name!r}"
            )
        entries[name] = (key, value)
    return entries


def _parse(text: str, build: bool) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:
        if not build:
            return {}  # Python 3.10 at run time: documented as "no preferences"
        import tomlkit  # the build hook's dependency anyway; not on load()'s path

        return tomlkit.parse(text).unwrap()
    return tomllib.loads(text)


def lookup(
    names: Iterable[str], environ: Mapping[str, str] | None = None, build: bool = False
) -> tuple[bool, str] | None:
    """(enabled, why) from the first existing preferences file that names one of ``names``."""
    for file in candidates(environ, build):
        if not file.is_file():
            continue
        entries = read(file, build)
        for name in names:
            hit = entries.get(canonical_name(name))
            if hit is not None:
                key, value = hit
                return value, f"{file}: [{key}] {KEY} = {'true' if value else 'false'}"
        return None  # the environment's file was found; it just does not name this package
    return None
