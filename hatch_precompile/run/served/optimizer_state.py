"""The state a compiled optimizer step's trace makes, made before its first served call's guards.

Dynamo does not trace an optimizer's ``_init_group``: it runs it while it traces the step (with
the step's own empty lists, variables/optimizer.py), so the state it makes (Adam's ``step``,
``exp_avg``, ``exp_avg_sq``) is there when the guards that hold it are built. A served step has no
trace: before its guards first see an optimizer, the same calls are made here, with the arguments
the build recorded (builder/served/optimizer_steps.py), and the same two changes the trace makes
first: ``capturable`` set where every parameter is on a GPU and has no state yet, and a loaded
``step`` moved to its parameter's device. Until an optimizer has a state (a call before any
gradient makes none), then never again: a call whose guards fail later (a state cleared, loaded
otherwise) is traced, and its trace makes the state, as torch's always does.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from hatch_precompile.run.torch_internals.registry import lookup

log = logging.getLogger("hatch_precompile.touchpoints")

_made: weakref.WeakSet[Any] = weakref.WeakSet()  # the optimizers whose state was made here
_lock = threading.Lock()


def made(optimizer: Any, calls: list[list[dict[str, Any]]]) -> bool:
    """Whether ``optimizer`` has the state a trace of its step would have made before its guards:
    made now, until the optimizer has one; False where it cannot be (its guards then fail: traced)."""
    if optimizer in _made:  # every later call: no lock taken
        return True
    with _lock:
        if optimizer in _made:
            return True
        try:
            lookup("optimizer-init", "call")
            _capturable(optimizer)
            for arguments in calls:
                _step_on_its_device(optimizer)
                optimizer._init_group(*[_argument(optimizer, each) for each in arguments])
        except Exception:
            log.debug("touchpoint optimizer-init: the state of %s not made", type(optimizer).__qualname__, exc_info=True)
            return False
        if optimizer.state:
            _made.add(optimizer)
        return True


def _capturable(optimizer: Any) -> None:
    """As Dynamo's ``_set_capturable``: a group whose parameters are all on a GPU, none with state yet."""
    for group in optimizer.param_groups:
        params = group.get("params", [])
        if ("capturable" in group and all(p not in optimizer.state for p in params)
                and all(p.is_cuda or p.is_xpu for p in params)):
            group["capturable"] = True


def _step_on_its_device(optimizer: Any) -> None:
    """As Dynamo's ``move_step_if_cpu``: a ``step`` loaded on the CPU moved to its parameter's device."""
    for p, state in optimizer.state.items():
        if "step" in state and state["step"].is_cpu:
            state["step"] = state["step"].to(p.device)


def _argument(optimizer: Any, described: dict[str, Any]) -> Any:
    if "group" in described:
        return optimizer.param_groups[described["group"]]
    if "list" in described:
        return []
    return described["value"]
