"""bench/ttfs.py's protocol: ``train_step()``, ``trainer()`` and ``infer()``."""

from hf_bert_train.model import Trainer, make_batch, make_model


def train_step():
    return Trainer(make_model()).step(*make_batch())


def trainer():
    """(one training step, AdamW included, as a zero-argument call; the model it trains)."""
    trainer = Trainer(make_model())
    batch = make_batch()
    return (lambda: trainer.step(*batch)), trainer.model


def infer():
    trainer = Trainer(make_model().eval())
    return trainer.predict(*make_batch()[:2])
