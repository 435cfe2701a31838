"""The benchmark protocols: bench/ttfs.py's first calls and bench/serve.py's ``serve(mode)``."""

import os

import torch

from tiny_transformer.model import Trainer, classify, classify_step, make_batch, make_model


def train_step():
    return Trainer(make_model()).step(*make_batch())


def trainer():
    """bench/ttfs.py's training protocol: (one training step, optimizer included, as a zero-argument
    call; the model it trains). The first call is the first step."""
    trainer = Trainer(make_model())
    tokens, labels = make_batch()
    return (lambda: trainer.step(tokens, labels)), trainer.model


def infer():
    return Trainer(make_model()).predict(make_batch()[0])


def serve(mode: str):
    model = make_model()
    model.load_state_dict(torch.load(os.environ["BENCH_WEIGHTS"], weights_only=True))  # as a server does
    model.eval()
    tokens = make_batch(seed=5)[0][:5]  # a batch size the workload never used
    run = classify_step.fallback if mode == "compiled" else {"eager": classify, "step": classify_step}[mode]
    return lambda: run(model, tokens)


def checkpoint(path: str) -> None:
    """The weights a server reads at run time: another seed, every tensor moved off its init."""
    model = make_model(seed=7)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.05 * torch.randn_like(tensor))
    torch.save(model.state_dict(), path)
