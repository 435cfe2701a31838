"""``save_step`` under ``hatch-precompile verify``: the shipped step, loaded as users get it, against ``fn``.

Each call adds a record to ``this_process.verified`` (its name, the route it took and why, what
differed), which verify's child (child/verify_child.py) reports. A shipped exported step is first
opened by a process of its own (child/package_proof.py): a loader that crashes there would take the
user's process with it, and is reported instead of called.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from hatch_precompile.builder.steps.step_check import check_against_reference, with_backward
from hatch_precompile.errors import LoaderCrashed, Skip, StepMismatch
from hatch_precompile.protocol import step_files
from hatch_precompile.protocol.step_file import EXPORTED
from hatch_precompile.run import variables
from hatch_precompile.run.steps import shipped_steps


@dataclass
class ProcessState:
    """What save_step found in verify's child. It lives as long as the process: the workloads' own
    code calls save_step, with nothing to hand it, and the child reports it after them."""

    verified: list[dict[str, Any]] = field(default_factory=list)
    """One record per step the workloads saved, in order (child/verify_child.py reports them)."""


this_process = ProcessState()


def verify(name: str, fn: Callable, args: tuple, check: str, backward: bool = False) -> None:
    """Under verify: the shipped step, loaded as users get it, against ``fn`` on changed arguments.
    A step the set does not ship is left alone: the workload's own calls show what it compiles."""
    from hatch_precompile.run.sets import artifacts

    package = variables.package() or ""
    try:
        found = artifacts.find(package)
    except Skip:
        found = None
    shipped = found is not None and name in found.manifest.steps
    record: dict[str, Any] = {"name": name, "route": None, "reason": None, "problems": [], "shipped": shipped}
    crash = _loader_crash(found, name, args) if shipped else None
    if crash:  # proven at build, yet it takes a process down here: the user's would go with it
        record["problems"].append(f"step {name!r}: {crash}; load_step() opens it only where a build proved it")
    elif shipped:
        step = shipped_steps.load_step(package, name, fn, backward=backward)
        reference = with_backward(fn) if backward else fn  # what the step leaves: the loss, gradients in .grad
        try:
            check_against_reference(name, reference, args, step, check)
        except StepMismatch as exc:
            record["problems"].append(str(exc))
        record["route"], record["reason"] = step.route, step.reason
    this_process.verified.append(record)
    return None


def _loader_crash(found: Any, name: str, args: tuple) -> str | None:
    """How torch's loader crashed on the shipped exported step in a process of its own, or None
    (not exported, proven here, or refused: load_step says why it refuses)."""
    import io

    import torch

    from hatch_precompile.builder.steps import export_contract
    from hatch_precompile.child import package_proof

    files = step_files(name)
    try:
        record = json.loads(found.read(files["json"]))
        if record.get("route") != EXPORTED:
            return None
        positions = [int(k) for k in record["export"]["modules"]]
        constants = export_contract.module_tensors(args, positions)
        if files["constants"] in found.manifest.files:
            constants.update(torch.load(io.BytesIO(found.read(files["constants"])), weights_only=True))
        inputs = tuple(a for i, a in enumerate(args) if i not in positions)
        package_proof.prove(found.read(files["pt2"]), constants, export_contract.flat_tensors(torch, inputs),
                            variables.proof_timeout())
    except LoaderCrashed as exc:
        return str(exc)
    except Exception:  # the contract, the files or the loader's refusal: load_step reports those
        return None
    return None
