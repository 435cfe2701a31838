"""Warm-up workload: one training step and one inference call on the GPU, as users make them."""

from gpu_block.model import Trainer, make_batch, make_model


def workload() -> None:
    trainer = Trainer(make_model())
    tokens, targets = make_batch()
    trainer.step(tokens, targets)
    trainer.predict(tokens)
