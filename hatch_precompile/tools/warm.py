"""``hatch-precompile warm``: build a package's caches here, for this environment (``Pkg.precompile()``).

For a package whose shipped artifacts do not match this environment (another torch, CPU or
compiler), or that shipped none (a ``PRECOMPILE=0`` wheel): run its workloads with capture()
(build/workload_run.py) -- the same child process as a wheel build -- and keep the result in the
per-user cache (run/usercache.py), which ``load()`` uses when the shipped artifacts are unusable
or absent.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.build.reporter import Reporter
from hatch_precompile.build.workload_run import WorkloadFailed, capture
from hatch_precompile.errors import PrecompileError
from hatch_precompile.protocol import DIRNAME, MANIFEST_FILE, SETS_DIR, Manifest, ManifestError
from hatch_precompile.run import artifacts, usercache


class WarmError(PrecompileError):
    """Nothing was stored; the message says why."""


def shipped_match(package: str, directory: Path) -> str | None:
    """The torch/env summary if a shipped artifact set already fits this environment, else None."""
    for manifest_file in sorted((directory / DIRNAME / SETS_DIR).glob(f"*/{MANIFEST_FILE}")):
        try:
            manifest = Manifest.parse(manifest_file.read_bytes())
        except (ManifestError, OSError):
            continue
        if artifacts.env_problem(manifest) is None:
            return f"torch {manifest.env.get('torch')}, CPU capability {manifest.env.get('cpu_capability')}"
    return None


def warm(
    package: str, workloads: list[str], timeout: float, say: Callable[[str], None], device: str = "auto"
) -> tuple[Path, Manifest]:
    """Run ``workloads`` and store their artifacts for this environment; (dir, manifest)."""
    try:
        return _warm(package, workloads, timeout, say, device)
    except WorkloadFailed as exc:
        raise WarmError(str(exc) + (f" (this machine has no usable GPU: {exc.no_gpu})" if exc.no_gpu else "")) from None
    except OSError as exc:
        raise WarmError(str(exc)) from None


def _warm(package: str, workloads: list[str], timeout: float, say: Callable[[str], None], device: str
          ) -> tuple[Path, Manifest]:
    work = _work_dir()
    try:
        built = capture(
            root=None, work_dir=work, package=package, workloads=workloads, timeout=timeout,
            reporter=Reporter(say, say), device=device,
        )
        if built is None:
            raise WarmError(
                f"the workload(s) {', '.join(workloads)} compiled nothing (no torch.compile call ran "
                "and no TorchScript module was saved); nothing stored"
            )
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
    base = usercache.base_dir()
    if base is None or not base.is_dir():
        return []
    found = []
    for directory in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
        entries = usercache.entries(directory.name)
        if entries:  # other hatch-precompile caches live here too
            found.append((directory.name, len(entries),
                          sum(f.stat().st_size for e in entries for f in e.rglob("*") if f.is_file())))
    return found


def clear(package: str) -> Path | None:
    """Remove every stored entry of ``package``; the dir that was removed, or None."""
    directory = usercache.package_dir(package)
    if directory is None or not directory.exists():
        return None
    shutil.rmtree(directory)
    return directory


def _work_dir() -> Path:
    """A scratch dir on the store's filesystem, so that storing is a rename."""
    base = usercache.base_dir()
    if base is None:
        raise OSError("there is no home directory for the per-user cache")
    (base / ".tmp").mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="warm-", dir=base / ".tmp"))


def _store(package: str, built: Path, env: dict[str, Any]) -> Path:
    """Move ``built`` (a finished ``_precompiled`` dir) into place for ``env``."""
    target = usercache.env_dir(package, env)
    if target is None:
        raise OSError("there is no home directory for the per-user cache")
    target.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.rename(target, old)
    os.rename(built, target)  # a concurrent load() sees the old entry, none, or the new one
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target


def _version(package: str) -> str | None:
    for name in metadata.packages_distributions().get(package.split(".")[0], []):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None
