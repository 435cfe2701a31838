"""A compiled optimizer step in the build's second pass: its tensors lifted as graph inputs, and the
state its trace made recorded, so that a new process can serve it (run/served/optimizer_state.py).

Dynamo marks an optimizer's parameters and state "static, guarded" (variables/optimizer.py), which
makes each a graph attribute, and torch saves no guards for a graph that holds parameters ("Graph
contains named parameters due to static addresses."): the step was traced at every first call.
Here, in this pass only, the optimizer's marks are unguarded, as ``mark_static_address`` takes by
default: the tensors are the graph's inputs, each under its own TENSOR_MATCH guard, and torch saves
the frame. Its trace runs the optimizer's ``_init_group`` (making the state its guards then hold);
the arguments of each call are recorded by the optimizer's source, for the run side to make the
same state before the first served call's guards.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from hatch_precompile.run.torch_internals import patching

_OPTIMIZER_VARIABLES = "torch._dynamo.variables.optimizer"  # whose marks are unguarded
_PLAIN = (type(None), bool, int, float, str)


class OptimizerSteps:
    def __init__(self) -> None:
        self.calls: dict[str, list[list[dict[str, Any]]]] = {}  # optimizer's source -> its _init_group calls
        self.unrecorded: str | None = None  # why a call's arguments could not be recorded

    def install(self) -> None:
        patching.wrap("optimizer-static-address", before=_unguarded)
        patching.wrap("optimizer-init-args", after=self._init_args)

    def taken(self) -> tuple[dict[str, list[list[dict[str, Any]]]], str | None]:
        """The calls recorded since the last guarded code (its trace's), and why one was not; forgotten."""
        found, why = self.calls, self.unrecorded
        self.calls, self.unrecorded = {}, None
        return found, why

    def _init_args(self, arguments: dict[str, Any], result: Any) -> None:
        variable = arguments.get("self")
        optimizer, source = getattr(variable, "value", None), getattr(variable, "source", None)
        name = getattr(source, "name", None)
        name = name() if callable(name) else name
        try:
            args, kwargs = result
            described = [_argument(optimizer, a) for a in args]
        except (TypeError, ValueError) as exc:
            self.unrecorded = self.unrecorded or f"its trace's call of the optimizer's _init_group is not recorded ({exc})"
            return
        if kwargs or not isinstance(name, str):
            self.unrecorded = self.unrecorded or "its trace called the optimizer's _init_group by keyword or from no source"
            return
        calls = self.calls.setdefault(name, [])
        if described not in calls:  # a trace that restarts calls it again
            calls.append(described)


def _unguarded(arguments: dict[str, Any]) -> dict[str, Any] | None:
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == patching.__name__:
        frame = frame.f_back  # the wrapper's own frames
    if frame is not None and frame.f_globals.get("__name__") == _OPTIMIZER_VARIABLES and arguments.get("guard"):
        return {"guard": False}
    return None


def _argument(optimizer: Any, value: Any) -> dict[str, Any]:
    """One argument of ``_init_group`` as the run side makes it again: a param group of the
    optimizer by its index, an empty list (Dynamo's, filled by the call), or a plain constant."""
    for index, group in enumerate(getattr(optimizer, "param_groups", ())):
        if value is group:
            return {"group": index}
    if type(value) is list and not value:
        return {"list": []}
    if type(value) in _PLAIN:
        return {"value": value}
    raise ValueError(f"an argument of type {type(value).__name__}")
