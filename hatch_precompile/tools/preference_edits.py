"""Editing the preferences file (``hatch-precompile disable/enable``), keeping it as written.

tomlkit keeps comments, order and layout byte for byte; only the value changes, and a new
package gets a table appended. Reading is run/switch.py's.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hatch_precompile.errors import PreferencesError
from hatch_precompile.protocol import canonical_name
from hatch_precompile.run.switch import KEY

HEADER = (
    "# hatch-precompile preferences for this environment: per-package switches read by the\n"
    "# build hook and by hatch_precompile.load(). Edit by hand or with\n"
    "# `hatch-precompile disable NAME` / `hatch-precompile enable NAME`.\n"
)
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")


def is_valid_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name))


def set_enabled(file: Path, name: str, enabled: bool) -> tuple[str, bool | None]:
    """Set ``[name] enable`` in ``file``, keeping everything else byte for byte.

    Returns (the table name used, the previous value or None).
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    target = canonical_name(name)
    try:
        text = _read_text(file) if file.exists() else HEADER
        doc = tomlkit.parse(text)
    except (OSError, UnicodeDecodeError, TOMLKitError) as exc:
        raise PreferencesError(f"preferences file {file} cannot be read: {exc}") from None
    matches = [key for key in doc if canonical_name(key) == target]
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
        old = old.unwrap() if old is not None and hasattr(old, "unwrap") else old
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
