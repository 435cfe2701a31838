"""Warm-up workload: the training loss's forward and backward and the served inference, exported for
any batch size; one training step and one inference call as users make them, for the fallbacks."""

import torch

import hatch_precompile
from tiny_transformer.model import BATCHES, Trainer, classify, classify_step, make_batch, make_model, training_loss


def workload() -> None:
    trainer = Trainer(make_model())
    tokens, labels = make_batch()
    hatch_precompile.save_step("loss", training_loss, trainer.model, tokens, labels, backward=True,
                               dynamic_shapes=(None, {0: BATCHES}, {0: BATCHES}))
    trainer.step(tokens, labels)  # here the step's fallback: torch.compile, then backward()
    trainer.predict(tokens)
    served = make_model().eval()
    with torch.no_grad():
        hatch_precompile.save_step("classify", classify, served, tokens, dynamic_shapes=(None, {0: BATCHES}))
        classify_step.fallback(served, tokens)
