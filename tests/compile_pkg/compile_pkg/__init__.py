"""A package that only calls torch.compile, as most do: no load_step, nothing but load() added."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from compile_pkg.model import MLP, batch, compiled_loss, loss_fn, make, predictor, scaled, scaled_by  # noqa: E402

__all__ = ["MLP", "batch", "compiled_loss", "loss_fn", "make", "precompile_status", "predictor", "scaled", "scaled_by"]
