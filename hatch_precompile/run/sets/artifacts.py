"""Reading a package's artifacts and distrusting them: every file's hash, as it is read.

The shipped sets (``<package>/_precompiled/``, read through ``importlib.resources`` so that a
zipped or read-only install works) and those ``hatch-precompile warm`` stored for this user
(usercache.py) are read here; which one is used, if any, is verdict.py's decision.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from hatch_precompile.errors import ManifestError, Skip, Untrusted
from hatch_precompile.protocol import DIRNAME, MANIFEST_FILE, SETS_DIR, Manifest, blob_path, sha256
from hatch_precompile.run.sets import usercache, verdict


@dataclasses.dataclass(frozen=True)
class ArtifactSet:
    """One checked set of artifacts in ``root`` (a ``_precompiled`` dir: a Path or a Traversable)."""

    root: Any
    name: str  # its dir under sets/
    manifest: Manifest
    warmed: bool  # from the per-user cache rather than the wheel

    def read(self, relpath: str) -> bytes:
        """The bytes of ``relpath``, only if they are what the manifest says (raises Skip)."""
        entry = self.manifest.files.get(relpath)
        if entry is None:
            raise Skip(f"{relpath} is not listed in the manifest")
        node = self.root.joinpath(*blob_path(entry.sha256).split("/"))
        if isinstance(node, Path) and _through_symlink(self.root, node):
            raise Skip(f"{relpath} is a symlink; shipped artifacts must be plain files")
        try:
            blob = node.read_bytes()
        except OSError as exc:
            raise Skip(f"{relpath} cannot be read: {exc}") from None
        if len(blob) != entry.size or sha256(blob) != entry.sha256:
            raise Skip(f"{relpath} does not match its sha256 in the manifest (altered or truncated)")
        return blob


_found: dict[str, ArtifactSet] = {}
_lock = threading.RLock()  # re-entrant: reading the package's resources imports it, and it loads


def find(package: str) -> ArtifactSet | None:
    """The artifacts ``package`` can use here, or None if it has none. Raises Skip when it has
    some but none fit this environment (the message says why)."""
    with _lock:
        if package not in _found:
            found = _find(package)
            if found is None:
                return None
            _found[package] = found
        return _found[package]


def _find(package: str) -> ArtifactSet | None:
    chosen = verdict.set_to_use(package, _shipped(package), lambda facts: _warmed(package, facts))
    if isinstance(chosen, verdict.Refusal):
        raise Skip(chosen.reason)
    if chosen is None:
        return None
    return ArtifactSet(chosen.sets.root, chosen.name, chosen.manifest, chosen.sets.warmed)


def _shipped(package: str) -> verdict.Sets | verdict.Refusal | None:
    try:
        root = resources.files(package).joinpath(DIRNAME)
        sets = root.joinpath(SETS_DIR)
        if not sets.is_dir():
            return None
        manifests = {entry.name: entry.joinpath(MANIFEST_FILE).read_bytes() for entry in sets.iterdir()}
    except (ModuleNotFoundError, TypeError, OSError) as exc:
        return verdict.Refusal(f"cannot read the artifacts of {package!r}: {exc}")
    return verdict.Sets(root, manifests, warmed=False)


def in_dir(package: str, root: Path) -> ArtifactSet | verdict.Refusal | None:
    """The set ``package`` would use here, its shipped sets read from its ``_precompiled`` dir
    ``root`` (found without importing the package: ``hatch-precompile status``), else the user's
    store; a Refusal saying why none fits; None where there are none."""
    sets = root / SETS_DIR
    shipped: verdict.Sets | verdict.Refusal | None = None
    try:
        if sets.is_dir():
            shipped = verdict.Sets(root, {e.name: (e / MANIFEST_FILE).read_bytes() for e in sets.iterdir()}, warmed=False)
    except OSError as exc:
        shipped = verdict.Refusal(f"cannot read the artifacts of {package!r}: {exc}")
    chosen = verdict.set_to_use(package, shipped, lambda facts: _warmed(package, facts))
    if chosen is None or isinstance(chosen, verdict.Refusal):
        return chosen
    return ArtifactSet(chosen.sets.root, chosen.name, chosen.manifest, chosen.sets.warmed)


def all_sets(package: str) -> list[ArtifactSet]:
    """Every set ``package`` ships whose manifest is sound, whatever environment it is for."""
    try:
        root = resources.files(package).joinpath(DIRNAME)
        sets = root.joinpath(SETS_DIR)
        if not sets.is_dir():
            return []
        found = []
        for entry in sorted(sets.iterdir(), key=lambda e: e.name):
            try:
                found.append(ArtifactSet(root, entry.name, Manifest.parse(entry.joinpath(MANIFEST_FILE).read_bytes()),
                                         False))
            except (ManifestError, OSError):
                continue
        return found
    except (ModuleNotFoundError, TypeError, OSError, ValueError):
        return []


def _warmed(package: str, facts: Callable[[], verdict.Here]) -> verdict.Sets | verdict.Refusal | None:
    directory = usercache.package_dir(package)
    try:
        if directory is None or not directory.is_dir():
            return None  # the common case costs one stat, and no torch import
    except OSError:
        pass  # a store this user cannot look into: stored_sets says whose it is
    env = facts().env
    try:
        found = usercache.stored_sets(package, env)
    except Untrusted as exc:  # another account could have written it: never read
        return verdict.Refusal(f"ignoring what `hatch-precompile warm` stored in {usercache.env_dir(package, env)}: "
                               f"{exc}; remove it, or set XDG_CACHE_HOME to a dir of your own")
    except OSError as exc:
        return verdict.Refusal(f"warmed artifacts in {usercache.env_dir(package, env)}: {exc}")
    if found is None:
        return None
    root, manifests = found
    return verdict.Sets(root, manifests, warmed=True)


def _through_symlink(root: Path, node: Path) -> bool:
    """True if ``node`` or a directory between ``root`` and it is a symlink."""
    current = node
    while current != root and current != current.parent:
        if current.is_symlink():
            return True
        current = current.parent
    return False
