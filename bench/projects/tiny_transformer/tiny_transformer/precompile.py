"""Warm-up workload: one training step and one inference call, as users make them; the served
inference exported for any batch size."""

import torch

import hatch_precompile
from tiny_transformer.model import BATCHES, Trainer, classify, classify_step, make_batch, make_model


def workload() -> None:
    trainer = Trainer(make_model())
    tokens, labels = make_batch()
    trainer.step(tokens, labels)
    trainer.predict(tokens)
    served = make_model().eval()
    with torch.no_grad():
        hatch_precompile.save_step("classify", classify, served, tokens, dynamic_shapes=(None, {0: BATCHES}))
        classify_step.fallback(served, tokens)
