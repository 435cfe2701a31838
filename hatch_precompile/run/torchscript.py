"""``load_torchscript``: a TorchScript module the workload recorded at build (builder/torchscript.py)."""

from __future__ import annotations

import io
from typing import Any

from hatch_precompile.errors import Skip
from hatch_precompile.protocol import check_artifact_name
from hatch_precompile.run import load_caches
from hatch_precompile.run.sets import artifacts


def _check_name(name: str) -> None:
    check_artifact_name(name, "TorchScript")


def load_torchscript(package: str, name: str, map_location: Any = None) -> Any:
    """The ScriptModule ``package`` shipped as ``name``, or None (the caller falls back).

    Checks the same environment key and sha256 as ``load()``; never raises for an artifact
    problem.
    """
    _check_name(name)
    if load_caches.disabled_reason(package):
        return None
    try:
        found = artifacts.find(package)
        if found is None:
            return None
        relpath = found.manifest.torchscript.get(name)
        if relpath is None:
            raise Skip(f"no TorchScript module named {name!r} was shipped")
        blob = found.read(relpath)
        import torch

        return torch.jit.load(io.BytesIO(blob), map_location=map_location)
    except Skip as skip:
        load_caches.report_skip(load_caches.LoadResult(package, False, f"TorchScript {name!r}: {skip}"))
    except Exception as exc:
        load_caches.report_skip(load_caches.LoadResult(package, False, f"TorchScript {name!r}: {exc!r}"))
    return None
