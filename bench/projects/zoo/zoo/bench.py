"""One case's first training step (AdamW included) and first inference, as a user's program makes them."""

from __future__ import annotations

import importlib
import time

import torch


def available(name: str) -> bool:
    """Whether the case's library loads here (torchvision and timm need a torch they were built for)."""
    try:
        importlib.import_module(f"zoo.{name}")
        return True
    except Exception:
        return False


def first_steps(name: str) -> dict:
    case = importlib.import_module(f"zoo.{name}")
    model, batch = case.make_model(), case.make_batch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    began = time.perf_counter()
    loss = float(case.train_step(model, batch, optimizer))
    stepped = time.perf_counter()
    model.eval()
    with torch.no_grad():
        out = case.infer(model, batch)
    inferred = time.perf_counter()
    return {"loss": loss, "output": out.double().sum().item(), "output_abs": out.double().abs().sum().item(),
            "step_seconds": stepped - began, "infer_seconds": inferred - stepped,
            "parameters": sum(p.double().sum().item() for p in model.parameters())}
