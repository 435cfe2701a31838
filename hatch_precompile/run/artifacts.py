"""Finding a package's artifacts and distrusting them: manifest, environment key, every file's hash.

The shipped artifacts come first (``<package>/_precompiled/``, read through
``importlib.resources`` so that a zipped or read-only install works); when none of their sets
fits this environment, or there are none, those that ``hatch-precompile warm`` stored for it
(usercache.py). Of several sets (one per CPU capability, or per machine of a merged wheel), the
one whose environment key is this process's is used.
"""

from __future__ import annotations

import dataclasses
import threading
from importlib import resources
from pathlib import Path
from typing import Any

from hatch_precompile.errors import ManifestError, Skip, Untrusted
from hatch_precompile.protocol import DIRNAME, MANIFEST_FILE, SETS_DIR, Manifest, blob_path, first_mismatch, sha256
from hatch_precompile.run import machine, usercache


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
        sets = root.joinpath(SETS_DIR)
        if not sets.is_dir():
            return None
        manifests = {entry.name: entry.joinpath(MANIFEST_FILE).read_bytes() for entry in sets.iterdir()}
    except (ModuleNotFoundError, TypeError, OSError) as exc:
        raise Skip(f"cannot read the artifacts of {package!r}: {exc}") from None
    return choose(package, root, manifests, warmed=False)


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


def _warmed(package: str) -> ArtifactSet | None:
    directory = usercache.package_dir(package)
    try:
        if directory is None or not directory.is_dir():
            return None  # the common case costs one stat, and no torch import
    except OSError:
        pass  # a store this user cannot look into: stored_sets says whose it is
    env = environment_key()
    try:
        found = usercache.stored_sets(package, env)
    except Untrusted as exc:  # another account could have written it: never read
        raise Skip(f"ignoring what `hatch-precompile warm` stored in {usercache.env_dir(package, env)}: {exc}; "
                   "remove it, or set XDG_CACHE_HOME to a dir of your own") from None
    except OSError as exc:
        raise Skip(f"warmed artifacts in {usercache.env_dir(package, env)}: {exc}") from None
    if found is None:
        return None
    root, manifests = found
    try:
        return choose(package, root, manifests, warmed=True)
    except Skip as skip:
        raise Skip(f"warmed artifacts in {root}: {skip}") from None


def choose(package: str, root: Any, manifests: dict[str, bytes], warmed: bool) -> ArtifactSet:
    """The set whose environment key is this process's; Skip naming every set's mismatch if none."""
    problems, mismatched = {}, False
    for name, raw in sorted(manifests.items()):
        try:
            manifest = Manifest.parse(raw)
        except ManifestError as exc:
            problems[name] = str(exc)
            continue
        problem = env_problem(manifest)
        if problem is None:
            return ArtifactSet(root, name, manifest, warmed)
        problems[name], mismatched = problem, True
    if not problems:
        raise Skip("the artifact dir holds no set")
    reason = next(iter(problems.values())) if len(problems) == 1 else (
        f"none of the {len(problems)} artifact sets fits this environment: "
        + "; ".join(f"{name}: {problem}" for name, problem in problems.items())
    )
    if mismatched:
        from hatch_precompile.run import rebuild_command  # only on this path: it reads the installed metadata

        reason += f"; {rebuild_command.rebuild(package)}"
    raise Skip(reason)


def environment_key() -> dict[str, Any]:
    import torch  # lazily: only once there is something to compare it with

    from hatch_precompile.run import environment_key as envkey

    return envkey.current(torch)


def env_problem(manifest: Manifest) -> str | None:
    """Why ``manifest``'s artifacts do not fit this process, or None: the first differing key
    field, else a CPU feature or a system library the kernels need and this machine lacks."""
    mismatch = first_mismatch(manifest.env, environment_key())
    if mismatch is not None:
        field, built, here = mismatch
        return f"built for {field}={built!r}, this environment has {field}={here!r}"
    return machine_problem(manifest)


def machine_problem(manifest: Manifest) -> str | None:
    """What the set's kernels need of this CPU and system that is missing, or None."""
    lacking = machine.missing_features(manifest.cpu_features, machine.cpu_features())
    if lacking is None and manifest.cpu_target != "portable":
        # A portable set's kernels use only the ISA Inductor picked, which the capability and the
        # kernels' own names (their hashed command lines hold the ISA flags) already pin down.
        return (f"its kernels may use the CPU features {', '.join(manifest.cpu_features)} (built with "
                "-march=native), and this machine's CPU features cannot be read to check them")
    if lacking:
        return (f"its kernels may use CPU features this CPU lacks: {', '.join(lacking)} (built "
                f"{'with -march=native on another CPU' if manifest.cpu_target == 'native' else 'for another CPU'})")
    unresolved = machine.missing_libraries(manifest.libraries)
    if unresolved:
        return f"its kernels need system libraries this machine lacks: {', '.join(unresolved)}"
    return None


def _through_symlink(root: Path, node: Path) -> bool:
    """True if ``node`` or a directory between ``root`` and it is a symlink."""
    current = node
    while current != root and current != current.parent:
        if current.is_symlink():
            return True
        current = current.parent
    return False
