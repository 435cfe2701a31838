"""A small MLP whose training step, forward and served inference ship as steps captured at build."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from step_pkg.model import classify_step, make_batch, make_model, predict, train_step  # noqa: E402

__all__ = ["classify_step", "make_batch", "make_model", "precompile_status", "predict", "train_step"]
