"""A small image classifier whose compiled training step starts warm."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from sample_pkg.model import (  # noqa: E402
    ConvNet,
    Trainer,
    classify,
    classify_step,
    loss_step,
    make_batch,
    make_model,
    scripted_classifier,
    training_loss,
)

__all__ = ["ConvNet", "Trainer", "classify", "classify_step", "loss_step", "make_batch", "make_model",
           "precompile_status", "scripted_classifier", "training_loss"]
