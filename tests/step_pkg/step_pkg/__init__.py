"""A small MLP whose training step and forward ship as steps captured at build (save_step)."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from step_pkg.model import make_batch, make_model, predict, train_step  # noqa: E402

__all__ = ["make_batch", "make_model", "precompile_status", "predict", "train_step"]
