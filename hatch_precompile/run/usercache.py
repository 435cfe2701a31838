"""Where the per-user store of ``hatch-precompile warm`` keeps artifacts (warm writes, load() reads).

``load()`` falls back to it when a package's shipped artifacts do not match the environment or
were never shipped (a ``PRECOMPILE=0`` wheel). Layout::

    <user cache dir>/hatch-precompile/<package>/<env id>/   same layout as a wheel's _precompiled/

``<user cache dir>`` is ``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux, ``~/Library/Caches`` on
macOS, ``%LOCALAPPDATA%`` on Windows. ``<package>`` is the import name normalised like the
preferences file (``sample_pkg`` -> ``sample-pkg``). ``<env id>`` hashes the environment key, so
venvs with another torch or compiler that share one home keep separate entries; ``load()`` still
compares the stored manifest's key field by field and hashes every file, exactly as for a wheel.
Standard library only: ``load()`` looks here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hatch_precompile.protocol import APP, SETS_DIR, canonical_name, env_id


def base_dir() -> Path | None:
    """``<user cache dir>/hatch-precompile``, or None where there is no home to put it in."""
    try:
        if sys.platform == "win32":
            root = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        elif sys.platform == "darwin":
            root = str(Path.home() / "Library" / "Caches")
        else:
            xdg = os.environ.get("XDG_CACHE_HOME", "")
            root = xdg if os.path.isabs(xdg) else str(Path.home() / ".cache")  # XDG: relative is invalid
    except (RuntimeError, KeyError, OSError):
        return None
    return Path(root) / APP


def package_dir(package: str) -> Path | None:
    base = base_dir()
    return None if base is None else base / canonical_name(package)


def env_dir(package: str, env: dict[str, Any]) -> Path | None:
    directory = package_dir(package)
    return None if directory is None else directory / env_id(env)


def entries(package: str) -> list[Path]:
    """Every stored artifact dir of ``package`` (one per environment that warmed it)."""
    directory = package_dir(package)
    if directory is None or not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if (p / SETS_DIR).is_dir())
