"""A Hugging Face GPT-2 language model whose compiled steps start warm: code nobody here wrote."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from hf_gpt2.model import Trainer, make_batch, make_model  # noqa: E402

__all__ = ["Trainer", "make_batch", "make_model", "precompile_status"]
