"""Warm-up workload: for each size, one training step and one inference call, as users make them."""

from hf_gpt2.model import SIZES, Trainer, make_batch, make_model


def workload() -> None:
    for layers in SIZES:  # the second size recompiles on a guard failure: the same graphs as a fresh process's
        trainer = Trainer(make_model(layers))
        tokens = make_batch()
        trainer.step(tokens)
        trainer.predict(tokens)
