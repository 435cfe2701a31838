"""A small transformer encoder classifier whose compiled steps start warm."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from tiny_transformer.model import Encoder, Trainer, loss_step, make_batch, make_model, training_loss  # noqa: E402

__all__ = ["Encoder", "Trainer", "loss_step", "make_batch", "make_model", "precompile_status", "training_loss"]
