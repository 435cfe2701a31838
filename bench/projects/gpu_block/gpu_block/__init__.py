"""Transformer blocks at realistic width whose compiled CUDA steps start warm."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from gpu_block.model import LanguageModel, Trainer, compile_mode, make_batch, make_model  # noqa: E402

__all__ = ["LanguageModel", "Trainer", "compile_mode", "make_batch", "make_model", "precompile_status"]
