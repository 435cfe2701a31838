"""Each model compiled as a module by the package, once, at its first use (as a trainer class would)."""

import weakref

import torch

_compiled: "weakref.WeakKeyDictionary[torch.nn.Module, torch.nn.Module]" = weakref.WeakKeyDictionary()


def module(model: torch.nn.Module) -> torch.nn.Module:
    if model not in _compiled:
        _compiled[model] = torch.compile(model)
    return _compiled[model]


def train_step(model, optimizer, **inputs):
    """One step of a model whose output has a ``loss`` (inputs with labels), AdamW's step included."""
    optimizer.zero_grad(set_to_none=True)
    loss = module(model)(**inputs).loss
    loss.backward()
    optimizer.step()
    return loss.detach()
