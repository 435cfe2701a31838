"""TorchScript modules recorded by a workload at build time and loaded back at run time."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from hatch_precompile.protocol import check_artifact_name
from hatch_precompile.run import artifacts, loader, variables

def _check_name(name: str) -> None:
    check_artifact_name(name, "TorchScript")


def save_torchscript(name: str, module: Any) -> Path | None:
    """Record a scripted or traced ``module`` under ``name`` when called from a build workload.

    Outside a precompile build (a user running the workload by hand) this does nothing and
    returns None, so workloads can call it unconditionally.
    """
    _check_name(name)
    directory = variables.torchscript_dir()
    if not directory:
        return None
    import torch

    if not isinstance(module, torch.jit.ScriptModule):
        raise TypeError(
            f"save_torchscript({name!r}, ...) needs a torch.jit.ScriptModule "
            f"(from torch.jit.script or torch.jit.trace), got {type(module).__name__}"
        )
    path = Path(directory) / f"{name}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(module, str(path))
    return path


def load_torchscript(package: str, name: str, map_location: Any = None) -> Any:
    """The ScriptModule ``package`` shipped as ``name``, or None (the caller falls back).

    Checks the same environment key and sha256 as ``load()``; never raises for an artifact
    problem.
    """
    _check_name(name)
    if loader.disabled_reason(package):
        return None
    try:
        found = artifacts.find(package)
        if found is None:
            return None
        relpath = found.manifest.torchscript.get(name)
        if relpath is None:
            raise artifacts.Skip(f"no TorchScript module named {name!r} was shipped")
        blob = found.read(relpath)
        import torch

        return torch.jit.load(io.BytesIO(blob), map_location=map_location)
    except artifacts.Skip as skip:
        loader.report_skip(loader.LoadResult(package, False, f"TorchScript {name!r}: {skip}"))
    except Exception as exc:
        loader.report_skip(loader.LoadResult(package, False, f"TorchScript {name!r}: {exc!r}"))
    return None
