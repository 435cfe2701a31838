"""The benchmark protocol (bench/ttfs.py): the first training step of a fresh process."""

from compiled_transformer.model import Trainer, make_batch, make_model


def trainer():
    """(one training step, AdamW included, as a zero-argument call; the model it trains)."""
    trainer = Trainer(make_model())
    tokens, labels = make_batch()
    return (lambda: trainer.step(tokens, labels)), trainer.model


def train_step():
    return Trainer(make_model()).step(*make_batch())


def infer():
    return train_step()  # its one compiled call is the training loss
