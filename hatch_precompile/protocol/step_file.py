"""A shipped step's contract file (``steps/<name>.json``): its format, its routes, its fields.

The build writes it (builder/steps/step_capture.py, builder/steps/export_proof.py), ``load_step`` reads it (run/steps/shipped_steps.py),
``bake`` reuses an exported package only when its contract is of this format. Standard library
only: it is on ``load_step``'s path.

Every contract has ``format``, ``route`` and ``torch`` (the torch it was captured with). By route:

- ``"aotinductor"`` (an inference step exported and compiled by AOTInductor): ``export``, what a
  call must keep (run/steps/exported_step.py reads it), and ``proven``, the other torch versions ``bake``
  proved the same package on;
- ``"precompile"`` (a training step captured by ``torch.compiler.precompile``): ``modes``, ``args``
  (run/steps/call_contract.py's descriptions) and ``check``.

Format 2: the exported route's module tensors are all the caller's at run time (no ``baked``
values), and its settings are what the trace read (``reads``, ``hooks``), not digests of whole
modules. A format-1 contract is not served, and ``bake`` exports such a step again.
"""

from __future__ import annotations

from typing import Any

from hatch_precompile.errors import ContractError

CONTRACT_FORMAT = 2
EXPORTED = "aotinductor"  # the route as the contract and ``step.route`` name it
PRECOMPILE = "precompile"  # the contract's name of torch.compiler.precompile's route
PRECOMPILED = "precompiled"  # ``step.route`` after that route ran
FALLBACK = "fallback"  # ``step.route`` after load_step's torch.compile ran
ROUTES = (EXPORTED, PRECOMPILE)
# Why a shipped step refused a call, by kind: load_step warns once per kind in a process (not per
# message: those carry values), and only logs what the author planned for (a module in train()).
PLANNED, MODES, INPUTS, ARGUMENTS = "train mode", "modes", "inputs", "arguments"
MODULE, SETTINGS, LOADER = "module", "settings", "loader"
FIELDS = {EXPORTED: ("export",), PRECOMPILE: ("modes", "args", "check")}


def read_contract(record: Any, name: str) -> dict[str, Any]:
    """``record`` (a parsed contract file) checked: its format, its route, its route's fields."""
    if not isinstance(record, dict):
        raise ContractError(f"step {name!r} has a contract that is not a JSON object")
    if record.get("format") != CONTRACT_FORMAT:
        raise ContractError(f"step {name!r} has a contract of format {record.get('format')!r}; this hatch-precompile "
                            f"serves format {CONTRACT_FORMAT} (build the package again)")
    route = record.get("route")
    if route not in ROUTES:
        raise ContractError(f"step {name!r} has a contract for the route {route!r}, not one of {', '.join(ROUTES)}")
    missing = [f for f in ("torch", *FIELDS[route]) if f not in record]
    if missing:
        raise ContractError(f"step {name!r}'s contract lacks {', '.join(missing)}")
    if route == EXPORTED and not isinstance(record["export"], dict):
        raise ContractError(f"step {name!r}'s contract has an `export` that is not a JSON object")
    return record
