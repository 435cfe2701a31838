"""Run side: ``load(package)`` installs a package's shipped compile caches. Never raises.

Order of work, cheapest first: the gate (no torch import when off), the manifest's presence and
shape, the environment key (imports torch, which the package imports anyway), then the sha256 of
each file actually installed. Installation is no-clobber and atomic per file: each file is written
to a temp name in its destination dir and hard-linked into place, so concurrent loaders and
Inductor itself never see a partial entry, and an entry already present is never replaced.
"""

from __future__ import annotations

import dataclasses
import getpass
import logging
import os
import re
import stat
import tempfile
import threading
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

from hatch_precompile import gate, kernels, manifest, usercache
from hatch_precompile._child import BUILDING_VAR

log = logging.getLogger("hatch_precompile")


class PrecompileWarning(UserWarning):
    """Shipped artifacts were not used; the program compiles as usual."""


class _Skip(Exception):
    """Internal: stop loading, with this reason."""


@dataclasses.dataclass(frozen=True)
class LoadResult:
    package: str
    loaded: bool
    reason: str
    installed: int = 0  # files written into the cache dir by this call
    present: int = 0  # files that were already there
    cache_dir: str | None = None

    def __bool__(self) -> bool:
        return self.loaded


_results: dict[str, LoadResult] = {}
_manifests: dict[str, tuple[Any, dict[str, Any]]] = {}
_lock = threading.RLock()  # re-entrant: load("pkg") imports pkg, whose __init__ calls load("pkg")


def load(package: str) -> LoadResult:
    """Install ``package``'s shipped caches into this process's Inductor cache dir.

    Call it as ``hatch_precompile.load(__name__)`` from the package's ``__init__``. Returns a
    LoadResult; on any problem it skips, warns once with the reason, and returns a falsy result.
    """
    with _lock:
        if package in _results:
            return _results[package]
        try:
            result = _load(package)
        except _Skip as skip:
            result = LoadResult(package, False, str(skip))
            _warn(result)
        except Exception as exc:  # a broken artifact must never break `import package`
            result = LoadResult(package, False, f"unexpected error: {exc!r}")
            _warn(result)
        _results[package] = result
        log.debug("%s", result)
        return result


_warned: set[str] = set()


def _warn(result: LoadResult) -> None:
    message = f"hatch-precompile: not using {result.package}'s precompiled caches: {result.reason}"
    if message in _warned:
        return
    _warned.add(message)
    log.info(message)  # the warning below is the one user-visible report
    warnings.warn(message, PrecompileWarning, stacklevel=4)


def disabled_reason(package: str) -> str | None:
    """Why loading is off for ``package`` (a quiet skip), or None."""
    if os.environ.get(BUILDING_VAR):
        return "a precompile workload is running"
    try:
        enabled, why = gate.decide(package, default=True)
    except gate.GateValueError as exc:
        return str(exc)
    return None if enabled else f"disabled by {why}"


def _load(package: str) -> LoadResult:
    reason = disabled_reason(package)
    if reason:
        return LoadResult(package, False, reason)
    checked = checked_manifest(package)
    if checked is None:
        return LoadResult(package, False, "no precompiled artifacts shipped")
    root, data = checked
    cache_dir = inductor_cache_dir()
    installed, present = _install(root, data, cache_dir)
    if data.get("kernels") and not os.environ.get("HATCH_PRECOMPILE_NO_SPEEDUPS"):
        from hatch_precompile import speedups

        speedups.apply()
    reason = f"installed from {root} (hatch-precompile warm)" if usercache.contains(root) else "installed"
    return LoadResult(package, True, reason, installed, present, str(cache_dir))


def checked_manifest(package: str) -> tuple[Any, dict[str, Any]] | None:
    """(artifact dir, manifest) once the environment key matches; None if nothing is shipped.

    The shipped artifacts first; when they do not match or are absent, those that
    ``hatch-precompile warm`` stored for this environment (usercache.py). Raises _Skip when
    artifacts exist but none can be used here.
    """
    if package in _manifests:
        return _manifests[package]
    shipped_problem = None
    try:
        checked = _checked_shipped(package)
    except _Skip as skip:
        checked, shipped_problem = None, skip
    if checked is None:
        try:
            checked = _checked_warmed(package)
        except _Skip as skip:
            raise _Skip(f"{shipped_problem}; {skip}" if shipped_problem else str(skip)) from None
    if checked is None:
        if shipped_problem is not None:
            raise shipped_problem
        return None
    _manifests[package] = checked
    return checked


def _checked_shipped(package: str) -> tuple[Any, dict[str, Any]] | None:
    try:
        root = resources.files(package).joinpath(manifest.DIRNAME)
        manifest_file = root.joinpath(manifest.FILENAME)
        if not manifest_file.is_file():
            return None
        raw = manifest_file.read_bytes()
    except (ModuleNotFoundError, TypeError, OSError) as exc:
        raise _Skip(f"cannot read the artifacts of {package!r}: {exc}") from None
    try:
        data = manifest.parse(raw)
    except manifest.ManifestError as exc:
        raise _Skip(str(exc)) from None
    _check_env(package, data)
    return root, data


def _checked_warmed(package: str) -> tuple[Any, dict[str, Any]] | None:
    directory = usercache.package_dir(package)
    if directory is None or not directory.is_dir():
        return None  # the common case costs one stat, and no torch import
    import torch

    from hatch_precompile import envkey

    root = usercache.env_dir(package, envkey.current(torch))
    if root is None or not (root / manifest.FILENAME).is_file():
        return None
    try:
        data = manifest.parse((root / manifest.FILENAME).read_bytes())
    except (manifest.ManifestError, OSError) as exc:
        raise _Skip(f"warmed artifacts in {root}: {exc}") from None
    _check_env(package, data)
    return root, data


def _check_env(package: str, data: dict[str, Any]) -> None:
    import torch  # lazily: only once there is something to check it against

    from hatch_precompile import envkey

    mismatch = envkey.first_mismatch(data["env"], envkey.current(torch))
    if mismatch:
        field, shipped, here = mismatch
        raise _Skip(
            f"built for {field}={shipped!r}, this environment has {field}={here!r}; "
            f"rebuild the wheel here (pip install --no-build-isolation ...) "
            f"or run `hatch-precompile warm {package}`"
        )


def verified_bytes(root: Any, data: dict[str, Any], relpath: str) -> bytes:
    entry = data["files"].get(relpath)
    if entry is None:
        raise _Skip(f"{relpath} is not listed in the manifest")
    node = root.joinpath(*relpath.split("/"))
    if isinstance(node, Path) and _escapes(root, node):
        raise _Skip(f"{relpath} is a symlink; shipped artifacts must be plain files")
    try:
        blob = node.read_bytes()
    except OSError as exc:
        raise _Skip(f"{relpath} cannot be read: {exc}") from None
    if len(blob) != entry["size"] or manifest.sha256(blob) != entry["sha256"]:
        raise _Skip(f"{relpath} does not match its sha256 in the manifest (altered or truncated)")
    return blob


def _escapes(root: Path, node: Path) -> bool:
    """True if ``node`` or a directory between ``root`` and it is a symlink."""
    current = node
    while current != root and current != current.parent:
        if current.is_symlink():
            return True
        current = current.parent
    return False


def inductor_cache_dir() -> Path:
    """The dir Inductor will use (mirrors torch._inductor.runtime.cache_dir_utils)."""
    configured = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if configured:
        return Path(os.path.abspath(configured))
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def _destinations(root: Any, data: dict[str, Any]) -> dict[str, str]:
    """Manifest path -> path inside the cache dir, renaming relocatable kernels for this torch."""
    prefix = manifest.INDUCTOR_DIR + "/"
    dest = {p: p[len(prefix):] for p in data["files"] if p.startswith(prefix)}
    if data.get("kernels"):
        import torch

        values = kernels.path_values(os.path.dirname(torch.__file__))
        for kernel in data["kernels"]:
            source = verified_bytes(root, data, kernel["source"]).decode("utf-8")
            new_key = kernels.code_key(source, kernels.render(kernel["command"], values))
            if new_key == kernel["key"]:
                continue
            for path in kernel["files"]:
                name = path.rsplit("/", 1)[1].replace(kernel["key"], new_key, 1)
                dest[path] = kernels.cache_relpath(new_key, name[len(new_key):])
    return dest


def _install(root: Any, data: dict[str, Any], cache_dir: Path) -> tuple[int, int]:
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _Skip(f"cannot create the Inductor cache dir {cache_dir}: {exc}") from None
    if cache_dir.is_symlink() and cache_dir.lstat().st_uid != os.getuid():
        raise _Skip(f"the Inductor cache dir {cache_dir} is a symlink owned by another user")
    destinations = _destinations(root, data)
    pending = {
        cache_dir / relpath: source
        for source, relpath in destinations.items()
        if not os.path.lexists(cache_dir / relpath)
    }
    present = len(destinations) - len(pending)
    # Verify everything before writing anything: a bad file leaves the cache dir untouched.
    blobs = {target: verified_bytes(root, data, source) for target, source in pending.items()}
    installed = 0
    for target, blob in blobs.items():
        _make_dirs(cache_dir, target.parent)
        if _write_new(target, blob):
            installed += 1
        else:
            present += 1
    return installed, present


def _make_dirs(cache_dir: Path, directory: Path) -> None:
    """mkdir -p below the cache dir, refusing to walk through a symlink planted there."""
    current = cache_dir
    for part in directory.relative_to(cache_dir).parts:
        current = current / part
        try:
            os.mkdir(current, 0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            raise _Skip(f"cannot write to the Inductor cache dir {cache_dir}: {exc}") from None
        mode = os.lstat(current).st_mode
        if not stat.S_ISDIR(mode):
            raise _Skip(f"{current} in the Inductor cache dir is a symlink or not a directory")


def _write_new(target: Path, blob: bytes) -> bool:
    """Write ``target`` atomically unless it exists; False if someone else was first."""
    tmp = target.parent / f".hatch-precompile-{os.getpid()}-{threading.get_ident()}.tmp"
    mode = 0o755 if target.suffix == ".so" else 0o644
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
        try:
            os.link(tmp, target)  # fails if target exists: never clobbers
        except FileExistsError:
            return False
        except OSError:  # filesystems without hard links
            if os.path.lexists(target):
                return False
            os.rename(tmp, target)
            return True
        return True
    except OSError as exc:
        raise _Skip(f"cannot write to the Inductor cache dir: {exc}") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
