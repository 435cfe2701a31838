"""bench/serve.py's protocol: ``serve(mode)`` loads the checkpoint a server loads, returns ``answer()``."""

import os

import torch

from bn_convnet.model import classify, classify_step, make_images, make_model

serves_weights = True  # ``weights`` mode: the checkpoint's tensors, no module


def serve(mode: str):
    images = make_images(7, seed=5)  # a batch size the workload never used
    weights = torch.load(os.environ["BENCH_WEIGHTS"], weights_only=True)
    if mode == "weights":
        return lambda: classify_step(weights, images)
    model = make_model()
    model.load_state_dict(weights)
    model.eval()
    run = classify_step.fallback if mode == "compiled" else {"eager": classify, "step": classify_step}[mode]
    return lambda: run(model, images)


def checkpoint(path: str) -> None:
    """What training leaves: other weights, running statistics moved by batches in train()."""
    model = make_model(seed=7).train()
    with torch.no_grad():
        for seed in range(4):
            model(make_images(32, seed=10 + seed) * 1.5 + 0.5)
        model.head.bias.normal_()
    torch.save(model.state_dict(), path)
