"""Warm-up workload: one training step and one inference call, as users make them."""

from tiny_transformer.model import Trainer, make_batch, make_model


def workload() -> None:
    trainer = Trainer(make_model())
    tokens, labels = make_batch()
    trainer.step(tokens, labels)
    trainer.predict(tokens)
