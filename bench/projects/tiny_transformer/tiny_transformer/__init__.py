"""A small transformer encoder classifier whose compiled steps start warm."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from tiny_transformer.model import Encoder, Trainer, make_batch, make_model  # noqa: E402

__all__ = ["Encoder", "Trainer", "make_batch", "make_model", "precompile_status"]
