"""Torch's AOTInductor C++ loader and pytree, for an exported step (run/steps/exported_step.py): called, never
replaced; and whether this torch's Inductor keeps every tensor a constant the caller binds."""

from __future__ import annotations

from typing import Any

from hatch_precompile.run.torch_internals.registry import lookup


def aoti_loader(torch: Any) -> Any:
    """``torch._C._aoti.AOTIModelPackageLoader``, or None where this torch has none."""
    lookup("aoti-loader", "call")
    return getattr(getattr(getattr(torch, "_C", None), "_aoti", None), "AOTIModelPackageLoader", None)


# The loader's arguments by torch version: (path, model name, run single-threaded, runners, device
# index) from 2.8; fewer before. The first form this torch takes is used.
_AOTI_FORMS = (("model", False, 1, -1), ("model", False), ("model",))


def aoti_open(torch: Any, path: str) -> Any:
    """The loader on the package at ``path``; raises (TypeError, RuntimeError) where it refuses."""
    loader = aoti_loader(torch)
    if loader is None:
        raise RuntimeError(f"torch {torch.__version__} has no AOTInductor loader")
    for form in _AOTI_FORMS:
        try:
            return loader(path, *form)
        except TypeError:  # another signature: try the next
            continue
    raise TypeError(f"torch {torch.__version__}'s AOTInductor loader takes none of the known argument forms")


def aoti_binds_in_place(loader: Any) -> bool:
    """Whether the loader's ``load_constants`` takes ``user_managed`` (torch 2.8+; 2.7's takes three
    arguments and copies the tensors, so an update in place would not be seen)."""
    lookup("aoti-loader", "call")
    return "user_managed" in (getattr(loader.load_constants, "__doc__", None) or "")


def aoti_bind(loader: Any, constants: dict[str, Any]) -> None:
    """Make ``constants`` the model's own tensors, in place (``user_managed``): the caller's
    later in-place updates are what the model reads. A loader without that form raises."""
    lookup("aoti-loader", "call")
    loader.load_constants(constants, False, True, True)  # use_inactive, check_full_update, user_managed


def keeps_tensor_constants() -> bool:
    """Whether this torch's Inductor can keep every tensor constant out of the code it generates
    (``always_keep_tensor_constants``: without it, 0-dim tensors and 1-D ones of up to 8 elements
    are folded in, and a caller's other values would not be seen; ``joint_graph_constant_folding``
    off)."""
    lookup("keep-constants", "setting")
    try:
        from torch._inductor import config
    except ImportError:
        return False
    return all(hasattr(config, setting) for setting in KEEP_CONSTANTS)


# The compile's settings, with that check. Inductor's joint-graph constant folding would still fold
# what is computed from single-element tensors alone (``logit_scale.exp()``, a BatchNorm's
# ``num_batches_tracked + 1``) into the code: it is turned off for these packages.
KEEP_CONSTANTS = {"always_keep_tensor_constants": True, "joint_graph_constant_folding": False}


def pytree() -> Any:
    """``torch.utils._pytree``: how an exported program flattens its inputs and outputs."""
    lookup("pytree", "call")
    import torch.utils._pytree as found

    return found
