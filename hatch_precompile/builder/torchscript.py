"""``save_torchscript``: a workload records a TorchScript module at build (run/torchscript.py loads it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatch_precompile.protocol import check_artifact_name
from hatch_precompile.run import variables


def save_torchscript(name: str, module: Any) -> Path | None:
    """Record a scripted or traced ``module`` under ``name`` when called from a build workload.

    Outside a precompile build (a user running the workload by hand) this does nothing and
    returns None, so workloads can call it unconditionally.
    """
    check_artifact_name(name, "TorchScript")
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
