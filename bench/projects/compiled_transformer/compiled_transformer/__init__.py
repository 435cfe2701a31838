"""A small transformer trained through plain torch.compile: the package adds load() and nothing else."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from compiled_transformer.model import Trainer, compiled_loss, make_batch, make_model  # noqa: E402

__all__ = ["Trainer", "compiled_loss", "make_batch", "make_model", "precompile_status"]
