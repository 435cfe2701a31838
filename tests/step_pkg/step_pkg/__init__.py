"""A small MLP whose training step, forward and served inference ship as steps captured at build."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from step_pkg.model import (  # noqa: E402
    classify_step,
    loss_step,
    make_batch,
    make_model,
    make_tagger,
    predict,
    tagging_loss,
    train_step,
)

__all__ = ["classify_step", "loss_step", "make_batch", "make_model", "make_tagger", "precompile_status", "predict",
           "tagging_loss", "train_step"]
