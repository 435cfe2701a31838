"""The calls torch folds into the code it traces, with no guard (its ``constant_fold_functions``:
``torch.distributed.is_initialized()``, ``torch.cuda.is_available()``, ...), answered here as a trace
here would answer them (protocol/served_compiles.py's ``FOLDED_FACTS`` names them)."""

from __future__ import annotations

from typing import Any

from hatch_precompile.run.torch_internals.registry import lookup


def function(call: str) -> Any:
    """The function ``call`` names (``torch.distributed.get_rank``), or None where this torch has none."""
    lookup("folded-calls", "call")
    import torch

    found: Any = torch
    try:
        for part in call.split(".")[1:]:
            found = getattr(found, part)
    except AttributeError:
        return None
    return found if callable(found) else None


def answer(call: str) -> tuple[str | None, str | None]:
    """(repr of what ``call()`` answers here, or None; the name of the exception it raises, or None)."""
    found = function(call)
    if found is None:
        return None, "AttributeError"
    try:
        return repr(found()), None
    except Exception as exc:
        return None, type(exc).__name__
