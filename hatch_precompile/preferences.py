"""The preferences file: per-package on/off switches of one environment.

The analog of Julia's ``LocalPreferences.toml``::

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
``sample_pkg`` and the project ``sample-pkg`` alike.

Reading is on ``load()``'s path: standard library ``tomllib`` only, and only if the file exists
(on Python 3.10, which has no ``tomllib``, there are no preferences at run time; the build
hook falls back to ``tomlkit``). Editing is for the CLI: ``tomlkit``, so comments and layout
survive.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

PATH_VAR = "HATCH_PRECOMPILE_PREFERENCES"
FILENAME = "hatch-precompile.toml"
KEY = "enable"
HEADER = (
    "# hatch-precompile preferences for this environment: per-package switches read by the\n"
    "# build hook and by hatch_precompile.load(). Edit by hand or with\n"
    "# `hatch-precompile disable NAME` / `hatch-precompile enable NAME`.\n"
)
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")


class PreferencesError(ValueError):
    """The preferences file cannot be read or holds a value that is not a switch."""


def canonical(name: str) -> str:
    """PEP 503 normalisation; the same result as ``packaging.utils.canonicalize_name``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_valid_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name))


def path(environ: Mapping[str, str] | None = None) -> Path:
    """The file of this environment: the one the CLI edits."""
    env = os.environ if environ is None else environ
    explicit = env.get(PATH_VAR, "").strip()
    return Path(explicit) if explicit else Path(sys.prefix) / FILENAME


def candidates(environ: Mapping[str, str] | None = None, build: bool = False) -> list[Path]:
    """Files to look at, in order; the first that exists is the one used."""
    env = os.environ if environ is None else environ
    found = [path(env)]
    venv = env.get("VIRTUAL_ENV", "").strip()
    if build and not env.get(PATH_VAR, "").strip() and venv:
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
                f"preferences file {file}: `{key}` must be a table, e.g. [{canonical(key)}] "
                f"with {KEY} = true or false"
            )
        if KEY not in table:
            continue
        value = table[KEY]
        if not isinstance(value, bool):
            raise PreferencesError(
                f"preferences file {file}: [{key}] {KEY} must be true or false, got {value!r}"
            )
        name = canonical(key)
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
            hit = entries.get(canonical(name))
            if hit is not None:
                key, value = hit
                return value, f"{file}: [{key}] {KEY} = {'true' if value else 'false'}"
        return None  # the environment's file was found; it just does not name this package
    return None


def set_enabled(file: Path, name: str, enabled: bool) -> tuple[str, bool | None]:
    """Set ``[name] enable`` in ``file``, keeping everything else byte for byte.

    Returns (the table name used, the previous value or None). The CLI's job; imports tomlkit.
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    from packaging.utils import canonicalize_name

    target = canonicalize_name(name)
    try:
        text = _read_text(file) if file.exists() else HEADER
        doc = tomlkit.parse(text)
    except (OSError, UnicodeDecodeError, TOMLKitError) as exc:
        raise PreferencesError(f"preferences file {file} cannot be read: {exc}") from None
    matches = [key for key in doc if canonical(key) == target]
    if len(matches) > 1:
        raise PreferencesError(
            f"preferences file {file}: [{matches[0]}] and [{matches[1]}] both name package {target!r}"
        )
    previous: bool | None = None
    if matches:
        key = matches[0]
        table = doc[key]
        if not isinstance(table, dict):
            raise PreferencesError(f"preferences file {file}: `{key}` must be a table")
        old = table.get(KEY)
        old = old.unwrap() if hasattr(old, "unwrap") else old
        previous = old if isinstance(old, bool) else None
        table[KEY] = enabled
    else:
        key = target
        table = tomlkit.table()
        table.add(KEY, enabled)
        doc.add(key, table)
    _write_atomically(file, tomlkit.dumps(doc))
    return key, previous


def _read_text(file: Path) -> str:
    with open(file, encoding="utf-8", newline="") as handle:  # keep \r\n line ends as they are
        return handle.read()


def _write_atomically(file: Path, text: str) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        if file.exists():
            os.chmod(tmp, file.stat().st_mode & 0o7777)
        os.replace(tmp, file)  # readers see the old file or the new one, never half of one
    finally:
        if tmp.exists():
            tmp.unlink()
