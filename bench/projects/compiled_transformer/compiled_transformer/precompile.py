"""The build's workload: train a few steps, as users do."""

from compiled_transformer.model import Trainer, make_batch, make_model


def workload() -> None:
    trainer = Trainer(make_model())
    tokens, labels = make_batch()
    for _ in range(2):
        trainer.step(tokens, labels)
