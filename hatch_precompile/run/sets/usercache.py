"""Where the per-user store of ``hatch-precompile warm`` keeps artifacts (warm writes, load() reads).

``load()`` falls back to it when a package's shipped artifacts do not match the environment or
were never shipped (a ``PRECOMPILE=0`` wheel). Layout::

    <user cache dir>/hatch-precompile/<package>/<env id>/   same layout as a wheel's _precompiled/

``<user cache dir>`` is ``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux, ``~/Library/Caches`` on
macOS, ``%LOCALAPPDATA%`` on Windows. ``<package>`` is the import name normalised like the
preferences file (``sample_pkg`` -> ``sample-pkg``). ``<env id>`` hashes the environment key, so
venvs with another torch or compiler that share one home keep separate entries; ``load()`` still
compares the stored manifest's key field by field and hashes every file, exactly as for a wheel.

The hashes prove nothing about who wrote a set (its manifest sits beside it), and a set's kernels
run in the user's process: so everything from ``hatch-precompile/`` down is read and written as
private_dirs.py allows. Each dir is this user's (one of ours with loose bits is tightened to
0700), each file owned by this user, nothing followed through a symlink; a store another account
owns or could write is not read, and ``load()`` says so in one line. The cache home itself may be
anything the user set (a symlink, a dir the group may write): nothing in it is taken on trust.
Standard library only: ``load()`` looks here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hatch_precompile.protocol import APP, MANIFEST_FILE, SETS_DIR, canonical_name, env_id
from hatch_precompile.run.sets import private_dirs


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


def store_dir(*parts: str, create: bool = False) -> private_dirs.Dir:
    """``<user cache dir>/hatch-precompile/<parts>``, opened and checked as private_dirs does:
    Untrusted (a PermissionError naming the owner or mode) for another account's, OSError
    (FileNotFoundError where missing, unless ``create``) otherwise."""
    base = base_dir()
    if base is None:
        raise FileNotFoundError("there is no home directory for the per-user cache")
    return private_dirs.open_private(base.parent, (base.name, *parts), create)


def entries(package: str) -> list[Path]:
    """Every stored artifact dir of ``package`` (one per environment that warmed it) in a store
    of this user's; none in one another account could write."""
    directory = package_dir(package)
    if directory is None:
        return []
    found = []
    try:
        with store_dir(directory.name) as stored:
            for name in stored.names():
                try:
                    with stored.private_sub(name, directory / name) as entry:
                        entry.lstat(SETS_DIR)
                except OSError:  # not a set's dir (.lock), or not this user's
                    continue
                found.append(directory / name)
    except OSError:
        return []
    return found


class Stored:
    """A file or dir of the store, for ``ArtifactSet.root``: each read walks down from the store
    again, as ``store_dir`` checks it, and never follows a symlink."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def joinpath(self, *names: str) -> "Stored":
        return Stored(*self.parts, *names)

    @property
    def name(self) -> str:
        return self.parts[-1]

    def read_bytes(self) -> bytes:
        *dirs, name = self.parts
        with store_dir(*dirs) as directory:
            return directory.read(name)

    def __str__(self) -> str:
        base = base_dir()
        return str(base.joinpath(*self.parts) if base is not None else "/".join(self.parts))


def stored_sets(package: str, env: dict[str, Any]) -> tuple[Stored, dict[str, bytes]] | None:
    """``warm``'s entry of ``package`` for ``env``: its root and each set's manifest bytes, by set
    name; None where there is none. Raises OSError (Untrusted: another account's)."""
    root = Stored(canonical_name(package), env_id(env))
    try:
        sets = store_dir(*root.parts, SETS_DIR)
    except FileNotFoundError:
        return None
    manifests = {}
    with sets:
        for name in sets.names():
            with sets.private_sub(name, f"{root}/{SETS_DIR}/{name}") as one:
                manifests[name] = one.read(MANIFEST_FILE)
    return root, manifests
