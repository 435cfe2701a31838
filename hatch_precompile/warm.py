"""``hatch-precompile warm``: build a package's caches here, for this environment (``Pkg.precompile()``).

For a package whose shipped artifacts do not match this environment (another torch, CPU or
compiler), or that shipped none (a ``PRECOMPILE=0`` wheel): run its workloads with capture() --
the same child process as a wheel build -- and keep the result in the per-user cache
(usercache.py), which ``load()`` uses when the shipped artifacts are unusable or absent.
"""

from __future__ import annotations

import json
import shutil
import time
from importlib import metadata
from pathlib import Path
from typing import Callable

from hatch_precompile import manifest, usercache
from hatch_precompile.capture import capture


class WarmError(Exception):
    """Nothing was stored; the message says why."""


def shipped_match(directory: Path) -> str | None:
    """The torch/env summary if the shipped artifacts already fit this environment, else None."""
    manifest_file = directory / manifest.DIRNAME / manifest.FILENAME
    if not manifest_file.is_file():
        return None
    try:
        data = manifest.parse(manifest_file.read_bytes())
    except (manifest.ManifestError, OSError):
        return None
    import torch

    from hatch_precompile import envkey

    if envkey.first_mismatch(data["env"], envkey.current(torch)) is not None:
        return None
    return f"torch {data['env'].get('torch')}, CPU capability {data['env'].get('cpu_capability')}"


def warm(
    package: str, workloads: list[str], timeout: float, say: Callable[[str], None]
) -> tuple[Path, dict]:
    """Run ``workloads`` and store their artifacts for this environment; (dir, manifest)."""
    work = usercache.work_dir()
    try:
        artifacts = capture(
            root=None, work_dir=work, package=package, workloads=workloads, timeout=timeout, say=say
        )
        if artifacts is None:
            raise WarmError(
                f"the workload(s) {', '.join(workloads)} compiled nothing (no torch.compile call ran "
                "and no TorchScript module was saved); nothing stored"
            )
        data = json.loads((artifacts / manifest.FILENAME).read_text())
        # Not part of the file list (manifest.json never is): what made this entry, for `report`.
        data["warmed"] = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "package_version": _version(package),
            "workloads": workloads,
        }
        manifest.write(artifacts, data)
        return usercache.store(package, artifacts, data["env"]), data
    finally:
        shutil.rmtree(work, ignore_errors=True)
        try:
            work.parent.rmdir()  # the scratch parent, once no other warm is using it
        except OSError:
            pass


def _version(package: str) -> str | None:
    for name in metadata.packages_distributions().get(package.split(".")[0], []):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None
