"""Finding a package's artifacts and distrusting them: manifest, environment key, every file's hash.

The shipped artifacts come first (``<package>/_precompiled/``, read through
``importlib.resources`` so that a zipped or read-only install works); when they are absent or do
not fit this environment, those that ``hatch-precompile warm`` stored for it (usercache.py).
"""

from __future__ import annotations

import dataclasses
import threading
from importlib import resources
from pathlib import Path
from typing import Any

from hatch_precompile.protocol import DIRNAME, MANIFEST_FILE, Manifest, ManifestError, first_mismatch, sha256
from hatch_precompile.run import usercache


class Skip(Exception):
    """Stop loading, with this reason: the one way the run side says "not here, and why"."""


@dataclasses.dataclass(frozen=True)
class ArtifactSet:
    """One checked set of artifacts: its dir (a Path or an importlib.resources Traversable)."""

    root: Any
    manifest: Manifest
    warmed: bool  # from the per-user cache rather than the wheel

    def read(self, relpath: str) -> bytes:
        """The bytes of ``relpath``, only if they are what the manifest says (raises Skip)."""
        entry = self.manifest.files.get(relpath)
        if entry is None:
            raise Skip(f"{relpath} is not listed in the manifest")
        node = self.root.joinpath(*relpath.split("/"))
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
    shipped_problem = None
    try:
        found = _shipped(package)
    except Skip as skip:
        found, shipped_problem = None, skip
    if found is None:
        try:
            found = _warmed(package)
        except Skip as skip:
            raise Skip(f"{shipped_problem}; {skip}" if shipped_problem else str(skip)) from None
    if found is None and shipped_problem is not None:
        raise shipped_problem
    return found


def _shipped(package: str) -> ArtifactSet | None:
    try:
        root = resources.files(package).joinpath(DIRNAME)
        manifest_file = root.joinpath(MANIFEST_FILE)
        if not manifest_file.is_file():
            return None
        raw = manifest_file.read_bytes()
    except (ModuleNotFoundError, TypeError, OSError) as exc:
        raise Skip(f"cannot read the artifacts of {package!r}: {exc}") from None
    return _checked(package, root, raw, warmed=False)


def _warmed(package: str) -> ArtifactSet | None:
    directory = usercache.package_dir(package)
    if directory is None or not directory.is_dir():
        return None  # the common case costs one stat, and no torch import
    root = usercache.env_dir(package, environment_key())
    if root is None or not (root / MANIFEST_FILE).is_file():
        return None
    try:
        raw = (root / MANIFEST_FILE).read_bytes()
    except OSError as exc:
        raise Skip(f"warmed artifacts in {root}: {exc}") from None
    try:
        return _checked(package, root, raw, warmed=True)
    except Skip as skip:
        raise Skip(f"warmed artifacts in {root}: {skip}") from None


def _checked(package: str, root: Any, raw: bytes, warmed: bool) -> ArtifactSet:
    try:
        manifest = Manifest.parse(raw)
    except ManifestError as exc:
        raise Skip(str(exc)) from None
    problem = env_problem(package, manifest)
    if problem:
        raise Skip(problem)
    return ArtifactSet(root, manifest, warmed)


def environment_key() -> dict[str, Any]:
    import torch  # lazily: only once there is something to compare it with

    from hatch_precompile.run import envkey

    return envkey.current(torch)


def env_problem(package: str, manifest: Manifest) -> str | None:
    """Why ``manifest``'s artifacts do not fit this process (the first differing field), or None."""
    mismatch = first_mismatch(manifest.env, environment_key())
    if mismatch is None:
        return None
    field, built, here = mismatch
    return (
        f"built for {field}={built!r}, this environment has {field}={here!r}; rebuild the wheel "
        f"for this environment (a plain `pip install` of the project's source does) or run "
        f"`hatch-precompile warm {package}`"
    )


def _through_symlink(root: Path, node: Path) -> bool:
    """True if ``node`` or a directory between ``root`` and it is a symlink."""
    current = node
    while current != root and current != current.parent:
        if current.is_symlink():
            return True
        current = current.parent
    return False
