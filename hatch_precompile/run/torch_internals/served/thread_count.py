"""The thread count an installed entry's guards hold, where the set's kernels read it when they run
(Inductor's ``cpp.dynamic_threads``): each guarded code's global-state guard (torch's
``GlobalStateGuard``, which its guard manager keeps as this very object) holds the build machine's
count; it holds this process's at install, and again at the first call of the package's compiled
object (``at_first_call``), as the guard of a trace made at that call would. An 8-core machine is
so served what a 2-core one built. Where a guard's state cannot be read it is left as it is:
served where the count is the one it holds, traced elsewhere."""

from __future__ import annotations

import functools
import json
from typing import Any

from hatch_precompile.run.torch_internals.registry import lookup
from hatch_precompile.run.torch_internals.served import compile_scope


def this_process_count(state: Any) -> Any:
    """The guarded code's serialized guards ``state`` given a global-state guard that holds this
    process's thread count; that guard, or None where it is left as it is."""
    lookup("global-state", "setting")
    try:
        guard = state.output_graph.global_state_guard
        counted = _counted_here(guard)
        if counted is None:
            return None
        replaced = type(guard)()
        replaced.__setstate__(counted)
        state.output_graph.global_state_guard = replaced
        return replaced
    except Exception:
        return None


def threads_now(guards: list[Any]) -> None:
    """Each of ``guards`` (``this_process_count``'s) holds this process's thread count now."""
    lookup("global-state", "setting")
    for guard in guards:
        try:
            counted = _counted_here(guard)
            if counted is not None:
                guard.__setstate__(counted)
        except Exception:
            continue


def at_first_call(compiled: Any, guards: list[Any]) -> None:
    """``guards`` take this process's count at the first call of ``compiled`` (a set thread count
    after ``import pkg``, before that call, is served)."""
    compile_scope.at_first_call(compiled, functools.partial(threads_now, guards))


def _counted_here(guard: Any) -> str | None:
    """``guard``'s state with this process's thread count, or None where it holds none."""
    import torch

    fields = json.loads(guard.__getstate__())
    if not isinstance(fields, dict) or "num_threads" not in fields:
        return None
    fields["num_threads"] = torch.get_num_threads()
    return json.dumps(fields)
