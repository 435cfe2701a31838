"""The build's workload: train with AdamW through the compiled loss, infer, scale."""

import torch

from compile_pkg.model import batch, compiled_loss, make, normalized, predictor, scaled


def workload() -> None:
    model = make()
    optimizer = torch.optim.AdamW(model.parameters())
    x, y = batch()
    for _ in range(2):
        optimizer.zero_grad()
        compiled_loss(model, x, y).backward()
        optimizer.step()
    with torch.no_grad():
        predictor(model.eval())(x)
    scaled(torch.ones(32))(x)
    normalized(x)
