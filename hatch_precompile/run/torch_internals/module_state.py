"""An ``nn.Module``'s private state, read: its hooks by kind, and every submodule, parameter and
buffer in its place (run/steps/exported_step.py, run/steps/call_contract.py); the names of the dicts that keep
hooks (run/served/unguarded_reads.py, builder/served/dynamo_reads.py)."""

from __future__ import annotations

from typing import Any

from hatch_precompile.run.torch_internals.registry import lookup

_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
# Every dict a module keeps hooks a call runs in (and torch.nn.modules.module's global ones:
# ``_global`` and the same name), as a kind of hook in words.
HOOK_KINDS = {"_forward_hooks": "forward hook", "_forward_hooks_with_kwargs": "forward hook",
              "_forward_pre_hooks": "forward pre-hook", "_forward_pre_hooks_with_kwargs": "forward pre-hook",
              "_backward_hooks": "backward hook", "_backward_pre_hooks": "backward pre-hook",
              "_forward_hooks_always_called": "forward hook"}


def hook_kind(name: str) -> str | None:
    """The kind of hook an attribute of a module (or of torch.nn.modules.module) named ``name`` keeps,
    in words; None where it keeps none."""
    global_ = name.startswith("_global_")
    kind = HOOK_KINDS.get(name.removeprefix("_global") if global_ else name)
    return None if kind is None else f"global {kind}" if global_ else kind


def module_hooks(module: Any) -> dict[str, dict[int, Any]]:
    """A module's own hooks, by kind (handle id: hook); raises where they are not as expected."""
    return {kind.strip("_"): dict(registered.items()) for kind, registered in zip(_HOOKS, module_hook_dicts(module))}


def module_hook_dicts(module: Any) -> list[dict[int, Any]]:
    """The dicts a module keeps its hooks in, by kind as ``_HOOKS`` lists them."""
    lookup("module-internals", "read")
    found = []
    for kind in _HOOKS:
        registered = vars(module).get(kind)
        if not isinstance(registered, dict):
            raise TypeError(f"torch.nn.Module.{kind} is a {type(registered).__name__}, not a dict")
        found.append(registered)
    return found


def module_slots(module: Any) -> list[tuple[Any, str, Any]]:
    """(container, name, value) of every submodule, parameter and buffer below ``module``: a call
    that finds each value in its place skips the full check; raises where they are not dicts."""
    lookup("module-internals", "read")
    slots: list[tuple[Any, str, Any]] = []
    for owner in module.modules():
        for kind in ("_modules", "_parameters", "_buffers"):
            container = vars(owner).get(kind)
            if not isinstance(container, dict):
                raise TypeError(f"torch.nn.Module.{kind} is a {type(container).__name__}, not a dict")
            slots.extend((container, name, value) for name, value in container.items())
    return slots
