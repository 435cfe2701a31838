"""Fine-tuning a transformers BERT classifier: its loss's forward and backward ship exported."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from hf_bert_train.model import Trainer, loss_step, make_batch, make_model, training_loss  # noqa: E402

__all__ = ["Trainer", "loss_step", "make_batch", "make_model", "precompile_status", "training_loss"]
