"""``hatch-precompile warm``: build a package's caches here, for this environment (``Pkg.precompile()``).

For a package whose shipped artifacts do not match this environment (another torch, CPU or
compiler), or that shipped none (a ``PRECOMPILE=0`` wheel): run its workloads with capture()
(builder/workload_run.py) -- the same child process as a wheel build -- and keep the result in the
per-user cache (run/sets/usercache.py), which ``load()`` uses when the shipped artifacts are unusable
or absent. What is stored is this user's only (dirs 0700, nothing others may write), as ``load()``
demands of it.

One ``warm`` of a package at a time: each holds a lock (``flock`` on ``.lock`` in the package's
store dir). A second one says it waits, and when the first stored a set for this environment in
the meantime, it takes that set rather than compiling the same again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.builder import capture_outcome
from hatch_precompile.builder.reporter import Reporter
from hatch_precompile.builder.workload_run import capture
from hatch_precompile.errors import ManifestError, Untrusted, WarmError
from hatch_precompile.protocol import DIRNAME, MANIFEST_FILE, SETS_DIR, Manifest, canonical_name
from hatch_precompile.run.sets import usercache, verdict


def shipped_match(directory: Path) -> str | None:
    """The torch/env summary if a set the package at ``directory`` shipped already fits this environment, else None."""
    here = None  # gathered (torch imported) only once there is a set to compare
    for manifest_file in sorted((directory / DIRNAME / SETS_DIR).glob(f"*/{MANIFEST_FILE}")):
        try:
            manifest = Manifest.parse(manifest_file.read_bytes())
        except (ManifestError, OSError):
            continue
        here = here or verdict.here()
        if verdict.problem(manifest, here) is None:
            return f"torch {manifest.env.get('torch')}, CPU capability {manifest.env.get('cpu_capability')}"
    return None


def warm(
    package: str, workloads: list[str], timeout: float, say: Callable[[str], None], device: str = "auto"
) -> tuple[Path, Manifest]:
    """Run ``workloads`` and store their artifacts for this environment; (dir, manifest)."""
    try:
        with _one_at_a_time(package, say) as waited_since:
            done = _stored_since(package, waited_since) if waited_since is not None else None
            if done is not None:
                say(f"warm: the other warm of {package} stored its caches for this environment: using them")
                return done
            return _warm(package, workloads, timeout, say, device)
    except Untrusted as exc:
        raise WarmError(f"not storing into the per-user cache: {exc}; remove it, or set XDG_CACHE_HOME to a dir "
                        "of your own") from None
    except OSError as exc:
        raise WarmError(str(exc)) from None


def _warm(package: str, workloads: list[str], timeout: float, say: Callable[[str], None], device: str
          ) -> tuple[Path, Manifest]:
    work = _work_dir()
    try:
        outcome = capture_outcome.outcome_of(
            lambda: capture(root=None, work_dir=work, package=package, workloads=workloads, timeout=timeout,
                            reporter=Reporter(say, say), device=device, users_torch=True),
            workloads, hints=lambda failure: [f"this machine has no usable GPU: {failure.no_gpu}"] if failure.no_gpu else [],
        )
        if outcome.artifacts is None:
            raise WarmError(outcome.why)
        built = outcome.artifacts
        (manifest_file,) = (built / SETS_DIR).glob(f"*/{MANIFEST_FILE}")
        manifest = Manifest.parse(manifest_file.read_bytes())
        # Not part of the file list (manifest.json never is): what made this entry, for `report`.
        manifest = dataclasses.replace(manifest, warmed={
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "package_version": _version(package),
            "workloads": workloads,
        })
        manifest_file.write_text(manifest.dumps())
        return _store(package, built, manifest.env), manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)
        try:
            work.parent.rmdir()  # the scratch parent, once no other warm is using it
        except OSError:
            pass


def stored() -> list[tuple[str, int, int]]:
    """(package, environments, bytes) of every package ``warm`` stored for, by name."""
    try:
        with usercache.store_dir() as base:
            names = [name for name in base.names() if not name.startswith(".")]
    except OSError:  # none, or not this user's (load() says so where it would be used)
        return []
    found = []
    for name in names:
        entries = usercache.entries(name)
        if entries:  # other hatch-precompile caches live here too
            found.append((name, len(entries), sum(f.stat().st_size for e in entries for f in e.rglob("*") if f.is_file())))
    return found


def clear(package: str) -> Path | None:
    """Remove every stored entry of ``package``; the dir that was removed, or None."""
    directory = usercache.package_dir(package)
    if directory is None or not directory.exists():
        return None
    shutil.rmtree(directory)
    return directory


@contextlib.contextmanager
def _one_at_a_time(package: str, say: Callable[[str], None]) -> Iterator[float | None]:
    """Hold warm's lock of ``package``: None if it was free, else when this one began to wait."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): two warms at once each compile, and the last one stays
        yield None
        return
    with usercache.store_dir(canonical_name(package), create=True) as directory:
        fd = directory.open_file(".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        since = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            since = time.time()
            say(f"warm: another `hatch-precompile warm {package}` is running; waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield since
    finally:
        os.close(fd)  # releases the lock


def _stored_since(package: str, since: float) -> tuple[Path, Manifest] | None:
    """The set stored for this environment after ``since`` (by the warm this one waited for), or None."""
    here = verdict.here()
    found = usercache.stored_sets(package, here.env)
    if found is None:
        return None
    root, manifests = found
    for raw in manifests.values():
        try:
            manifest = Manifest.parse(raw)
            at = datetime.datetime.strptime(str((manifest.warmed or {}).get("at")), "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except (ManifestError, ValueError):
            continue
        if at >= int(since) and verdict.problem(manifest, here) is None:
            return Path(str(root)), manifest
    return None


def _work_dir() -> Path:
    """A scratch dir on the store's filesystem, so that storing is a rename."""
    base = usercache.base_dir()
    if base is None:
        raise OSError("there is no home directory for the per-user cache")
    with usercache.store_dir(".tmp", create=True):
        pass
    return Path(tempfile.mkdtemp(prefix="warm-", dir=base / ".tmp"))  # 0700


def _store(package: str, built: Path, env: dict[str, Any]) -> Path:
    """Move ``built`` (a finished ``_precompiled`` dir) into place for ``env``: a rename between dirs
    opened as usercache checks them, so the set lands only in a store of this user's."""
    target = usercache.env_dir(package, env)
    base = usercache.base_dir()
    if target is None or base is None:
        raise OSError("there is no home directory for the per-user cache")
    _private(built)
    with usercache.store_dir(*built.parent.relative_to(base).parts) as source, \
            usercache.store_dir(canonical_name(package), create=True) as parent:
        old = None
        try:
            parent.lstat(target.name)
            old = f".{target.name}.old-{os.getpid()}"
            parent.rename(target.name, parent, old)
        except FileNotFoundError:
            pass
        source.rename(built.name, parent, target.name)  # a concurrent load() sees the old entry, none, or the new one
    if old is not None:
        shutil.rmtree(target.parent / old, ignore_errors=True)
    return target


def _private(built: Path) -> None:
    """Dirs 0700 and files writable by this user only, whatever umask the workloads ran under."""
    for path in (built, *built.rglob("*")):
        info = path.lstat()
        if stat.S_ISDIR(info.st_mode):
            path.chmod(0o700)
        elif stat.S_ISREG(info.st_mode):
            path.chmod(stat.S_IMODE(info.st_mode) & 0o700)


def _version(package: str) -> str | None:
    for name in metadata.packages_distributions().get(package.split(".")[0], []):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None
