"""What a shipped step assumed of its arguments, and whether a call keeps it.

A step is captured from one call at build (builder/steps/step_capture.py). What the capture baked in is written
down here as the step's contract: each module's class, submodules, settings, parameter shapes and
dtypes and train/eval mode; each tensor's shape, layout and dtype; each plain value; the process
modes (grad, default dtype, autocast). At run time a call that keeps the contract runs the shipped
step, any other the fallback (run/steps/shipped_steps.py).

The exported route (run/steps/exported_step.py) holds less and checks it at every call: each module's
structure (``structure``: class, submodules, tensor names and layouts), the plain values its trace
read (``plain_value_text``: builder/steps/trace_reads.py records them, ``reads_problem`` checks them), its
hooks (``hooks``), and tensor dims that may vary within ranges (``dims_problem``). Torch is
imported lazily.
"""

from __future__ import annotations

import enum
import hashlib
import json
import types
from typing import Any

VALUES = (bool, int, float, str, type(None))
_LONG = 200  # a value's text longer than this is kept as its digest


def describe(args: tuple, where: str = "argument") -> list[dict[str, Any]]:
    """Each argument as the capture sees it; equal descriptions keep the captured step valid."""
    return [_describe(arg, f"{where} {i}") for i, arg in enumerate(args)]


def _describe(arg: Any, where: str) -> dict[str, Any]:
    import torch

    if isinstance(arg, torch.nn.Module):
        return describe_module(arg)
    if isinstance(arg, torch.Tensor):
        return {"tensor": describe_tensor(arg)}
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
    tensors = [(kind, name, *describe_tensor(t)[:None if grads else 4])
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
    from hatch_precompile.run.torch_internals import module_state

    hooks = [[getattr(h, "__qualname__", type(h).__name__) for h in registered.values()]
             for registered in module_state.module_hooks(module).values()]
    return [plain, to_dict() if callable(to_dict) else None, hooks]


def describe_tensor(t: Any) -> list:
    """A tensor as a capture sees it: shape, stride, dtype, device, requires_grad."""
    return [list(t.shape), list(t.stride()), str(t.dtype), str(t.device), bool(t.requires_grad)]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def process_modes() -> dict[str, Any]:
    """The process modes a trace bakes in."""
    import torch

    return {"grad": torch.is_grad_enabled(), "default_dtype": str(torch.get_default_dtype()),
            "autocast": {device: str(torch.get_autocast_dtype(device)) if torch.is_autocast_enabled(device) else None
                         for device in ("cpu", "cuda")}}


def mismatch(contract: dict[str, Any], args: tuple) -> str | None:
    """Why ``args`` (in this process's modes) break the captured step's contract, or None."""
    if process_modes() != contract["modes"]:
        return f"the process modes {process_modes()} differ from the capture's {contract['modes']}"
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
        return f"a {argument_kind(got)} where the capture had a {argument_kind(was)}"
    if "module" in was:
        parts = {"module": "its class", "repr": "its submodules or their settings",
                 "settings": "its submodules' attributes, config or hooks",
                 "tensors": "its parameters or buffers (names, shapes, layouts, dtypes, devices, requires_grad)",
                 "training": "a train()/eval() mode"}
        return ", ".join(text for key, text in parts.items() if was.get(key) != got.get(key))
    return f"{json.dumps(got)[:200]} instead of {json.dumps(was)[:200]}"


def argument_kind(described: dict) -> str:
    """What ``describe`` found the argument to be: "module", "tensor", "list", "tuple", "dict" or "value"."""
    return next(iter(described))


# -- the exported route: structure, what the trace read, hooks ------------------------------------


def structure(module: Any) -> dict[str, str]:
    """What an exported step's code was made for, besides its reads: the class, the submodules
    (names and classes), the tensors (names, shapes, strides, dtypes, devices)."""
    submodules = [(name, f"{type(m).__module__}.{type(m).__qualname__}")
                  for name, m in module.named_modules(remove_duplicate=False)]
    tensors = [(kind, name, *describe_tensor(t)[:4])
               for kind, named in (("p", module.named_parameters(remove_duplicate=False)),
                                   ("b", module.named_buffers(remove_duplicate=False))) for name, t in named]
    return {"module": f"{type(module).__module__}.{type(module).__qualname__}",
            "submodules": _digest(json.dumps(submodules)), "tensors": _digest(json.dumps(tensors))}


def train_modes(module: Any) -> list[bool]:
    """Each submodule's train() flag, in ``modules()`` order."""
    return [m.training for m in module.modules()]


def requiring_grad(module: Any) -> list[str]:
    """The names of the parameters that require a gradient."""
    return [name for name, p in module.named_parameters(remove_duplicate=False) if p.requires_grad]


def modes_difference(module: Any, recorded: list[bool], position: int) -> str | None:
    """How ``module``'s train()/eval() flags differ from ``recorded`` (named by submodule), or None."""
    now = train_modes(module)
    if now == recorded:
        return None
    names = [name or "the module" for name, _ in module.named_modules()]
    changed = [f"{n} in {'train' if r else 'eval'}() at build, {'train' if m else 'eval'}() now"
               for n, r, m in zip(names, recorded, now) if r != m]
    return f"argument {position}'s modes differ from the export's: {'; '.join(changed[:3]) or 'other submodules'}"


def structure_difference(was: dict[str, str], got: dict[str, str]) -> str | None:
    parts = {"module": "its class", "submodules": "its submodules (names or classes)",
             "tensors": "its parameters or buffers (names, shapes, strides, dtypes, devices)"}
    changed = [text for key, text in parts.items() if was.get(key) != got.get(key)]
    return ", ".join(changed) or None


_SCALARS = frozenset(VALUES)


def plain_value_text(value: Any) -> str | None:
    """A plain value as the contract holds it (equal texts: the same value to a trace), or None
    for what is not plain (modules, tensors, objects): those are checked otherwise or not read."""
    if type(value) in _SCALARS:  # the common case, at every call: no more than repr
        return repr(value)
    text = _plain(value, 0)
    if text is None or len(text) <= _LONG:
        return text
    return "sha256:" + _digest(text)


def _plain(value: Any, depth: int) -> str | None:
    if isinstance(value, VALUES) or isinstance(value, enum.Enum):
        return repr(value)
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return f"<function {getattr(value, '__module__', None)}.{getattr(value, '__qualname__', value)}>"
    if depth < 3 and isinstance(value, (tuple, list)):
        items = [_plain(v, depth + 1) for v in value]
        return None if None in items else f"{type(value).__name__}({', '.join(items)})"  # type: ignore[arg-type]
    if depth < 3 and isinstance(value, dict):
        pairs = [(_plain(k, depth + 1), _plain(v, depth + 1)) for k, v in value.items()]
        return None if any(None in p for p in pairs) else "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    if type(value).__module__ == "torch" and type(value).__name__ in ("dtype", "device", "layout", "memory_format"):
        return repr(value)
    return None


def resolve_reads(module: Any, reads: list[list[str]], position: int) -> list[tuple[Any, str, str, tuple[str, ...], str]]:
    """The recorded reads of argument ``position`` bound to ``module``'s submodules: (submodule,
    attribute holding the config or "", name, value at build, what a reason calls it). Raises
    LookupError naming a submodule the module lacks."""
    resolved = []
    for path, attr, name, *values in reads:
        try:
            owner = module.get_submodule(path) if path else module
        except AttributeError:
            raise LookupError(f"argument {position} has no submodule {path!r}, which the export read") from None
        label = ".".join(p for p in (path, attr, name) if p)
        resolved.append((owner, attr, name, tuple(values), label))
    return resolved


_MISSING = object()


def reads_problem(resolved: list[tuple[Any, str, str, tuple[str, ...], str]], position: int) -> str | None:
    """Why the values the trace read differ now (the first that does), or None: a handful of
    attribute reads, made at every call. A field the step sets itself may hold what it read or
    what it left."""
    for owner, attr, name, values, label in resolved:
        holder = getattr(owner, attr, _MISSING) if attr else owner
        now = plain_value_text(getattr(holder, name, _MISSING))
        if now not in values:
            shown = "missing" if now is None else now
            return f"argument {position}'s {label}: {' or '.join(values)} at build, {shown} now"
    return None


def hooks(module: Any) -> list[list[Any]]:
    """Each submodule's hooks that run in a call, by path: [path, kind, [hook names]]."""
    from hatch_precompile.run.torch_internals import module_state

    found = []
    for path, sub in module.named_modules(remove_duplicate=False):
        for kind, registered in module_state.module_hooks(sub).items():
            if registered:
                found.append([path, kind, [getattr(h, "__qualname__", type(h).__name__) for h in registered.values()]])
    return found


def hook_dicts(modules: list[Any]) -> list[dict[int, Any]]:
    """Where ``modules`` keep their hooks (read once, at the full check)."""
    from hatch_precompile.run.torch_internals import module_state

    return [d for m in modules for d in module_state.module_hook_dicts(m)]


def hook_keys(dicts: list[dict[int, Any]]) -> tuple[int, ...]:
    """The handles of every hook in ``dicts`` now: equal while none is added or removed."""
    return tuple(key for registered in dicts if registered for key in registered)


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
