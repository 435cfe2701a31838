"""The build's workload: the loss's forward and backward exported for any batch and length; one
training step and one prediction as users make them, for the fallbacks."""

import hatch_precompile
from hf_bert_train.model import BATCH, LENGTH, Trainer, make_batch, make_model, training_loss


def workload() -> None:
    trainer = Trainer(make_model())
    ids, mask, labels = make_batch()
    hatch_precompile.save_step("loss", training_loss, trainer.model, ids, mask, labels, backward=True,
                               dynamic_shapes=(None, {0: BATCH, 1: LENGTH}, {0: BATCH, 1: LENGTH}, {0: BATCH}))
    trainer.step(ids, mask, labels)  # here the step's fallback: torch.compile, then backward()
    trainer.predict(ids, mask)
