"""What a shipped step assumed of its arguments, and whether a call keeps it.

A step is captured from one call at build (build/steps.py). What the capture baked in is written
down here as the step's contract: each module's class, submodules, settings, parameter shapes and
dtypes and train/eval mode; each tensor's shape, layout and dtype; each plain value; the process
modes (grad, default dtype, autocast). At run time a call that keeps the contract runs the shipped
step, any other the fallback (run/steps.py). The exported route (run/exported.py) records tensor
dims that may vary within ranges; ``dims_problem`` checks those. Torch is imported lazily.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

VALUES = (bool, int, float, str, type(None))


def describe(args: tuple, where: str = "argument") -> list[dict[str, Any]]:
    """Each argument as the capture sees it; equal descriptions keep the captured step valid."""
    return [_describe(arg, f"{where} {i}") for i, arg in enumerate(args)]


def _describe(arg: Any, where: str) -> dict[str, Any]:
    import torch

    if isinstance(arg, torch.nn.Module):
        return describe_module(arg)
    if isinstance(arg, torch.Tensor):
        return {"tensor": tensor(arg)}
    if isinstance(arg, (list, tuple)):
        return {type(arg).__name__: [_describe(a, f"{where}[{i}]") for i, a in enumerate(arg)]}
    if isinstance(arg, dict) and all(isinstance(k, str) for k in arg):
        return {"dict": {k: _describe(v, f"{where}[{k!r}]") for k, v in sorted(arg.items())}}
    if isinstance(arg, VALUES):
        return {"value": [type(arg).__name__, repr(arg)]}
    raise TypeError(f"{where} is a {type(arg).__name__}; a step's arguments are modules, tensors, "
                    "numbers, strings, None, and lists, tuples and dicts of those")


def describe_module(module: Any, grads: bool = True) -> dict[str, Any]:
    """A module as a trace of it depends on it: class, submodules, settings, tensors, modes.
    ``grads=False``: without its tensors' requires_grad (an inference step does not read it)."""
    tensors = [(kind, name, *tensor(t)[:None if grads else 4])
               for kind, named in (("p", module.named_parameters()), ("b", module.named_buffers())) for name, t in named]
    return {
        "module": f"{type(module).__module__}.{type(module).__qualname__}",
        # repr shows each submodule's settings (dropout p, eps, ...), which the trace baked in
        "repr": _digest(repr(module)),
        "settings": _digest(json.dumps([_settings(m) for m in module.modules()], default=repr)),
        "tensors": _digest(json.dumps(tensors)),
        "training": _digest(json.dumps([m.training for m in module.modules()])),
    }


def _settings(module: Any) -> list:
    """What ``repr`` may not show of a submodule and the trace baked in: its plain attributes
    (``num_heads``, ``batch_first``), its ``config`` where it has one (transformers), its hooks."""
    plain = sorted((k, repr(v)) for k, v in vars(module).items()
                   if k != "training" and isinstance(v, VALUES + (tuple,)) and not k.startswith("__"))
    config = getattr(module, "config", None)
    to_dict = getattr(config, "to_dict", None)
    hooks = [[getattr(h, "__qualname__", type(h).__name__) for h in getattr(module, kind, {}).values()]
             for kind in ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")]
    return [plain, to_dict() if callable(to_dict) else None, hooks]


def tensor(t: Any) -> list:
    return [list(t.shape), list(t.stride()), str(t.dtype), str(t.device), bool(t.requires_grad)]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def modes() -> dict[str, Any]:
    """The process modes a trace bakes in."""
    import torch

    return {"grad": torch.is_grad_enabled(), "default_dtype": str(torch.get_default_dtype()),
            "autocast": {device: str(torch.get_autocast_dtype(device)) if torch.is_autocast_enabled(device) else None
                         for device in ("cpu", "cuda")}}


def mismatch(contract: dict[str, Any], args: tuple) -> str | None:
    """Why ``args`` (in this process's modes) break the captured step's contract, or None."""
    if modes() != contract["modes"]:
        return f"the process modes {modes()} differ from the capture's {contract['modes']}"
    if len(args) != len(contract["args"]):
        return f"called with {len(args)} arguments, captured with {len(contract['args'])}"
    try:
        now = describe(args)
    except TypeError as exc:
        return str(exc)
    except Exception as exc:  # a module whose repr or config raises: compile it, never raise
        return f"the arguments could not be described: {exc!r}"
    for i, (was, got) in enumerate(zip(contract["args"], now)):
        if was != got:
            return f"argument {i} differs from the capture's: {difference(was, got)}"
    return None


def difference(was: dict, got: dict) -> str:
    if was.keys() != got.keys():
        return f"a {kind(got)} where the capture had a {kind(was)}"
    if "module" in was:
        parts = {"module": "its class", "repr": "its submodules or their settings",
                 "settings": "its submodules' attributes, config or hooks",
                 "tensors": "its parameters or buffers (names, shapes, layouts, dtypes, devices, requires_grad)",
                 "training": "a train()/eval() mode"}
        return ", ".join(text for key, text in parts.items() if was.get(key) != got.get(key))
    return f"{json.dumps(got)[:200]} instead of {json.dumps(was)[:200]}"


def kind(described: dict) -> str:
    return next(iter(described))


# -- dims that vary: the exported route ----------------------------------------------------------


def dims_problem(recorded: list, shape: Any, sizes: dict[str, int], ranges: dict[str, list]) -> str | None:
    """Why ``shape`` does not fit ``recorded`` (ints, or names of dims that vary within
    ``ranges``: ``{name: [low, high or None]}``), or None; names seen so far bind in ``sizes``, so
    that two inputs that share a dim must agree on it."""
    if len(shape) != len(recorded):
        return f"{len(shape)} dims, exported with {len(recorded)}"
    for i, (want, got) in enumerate(zip(recorded, shape)):
        if isinstance(want, int):
            if got != want:
                return f"dim {i} is {got}, exported for {want} only"
            continue
        low, high = ranges[want]
        if got < low or high is not None and got > high:
            return f"dim {i} is {got}, outside the exported range {low}..{'' if high is None else high} ({want})"
        if sizes.setdefault(want, got) != got:
            return f"dim {i} is {got}, and another input has {sizes[want]} for the same exported dim ({want})"
    return None
