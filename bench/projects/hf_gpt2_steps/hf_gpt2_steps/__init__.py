"""hf_gpt2's GPT-2, its steps shipped captured ahead of time: no Dynamo at the first call (torch 2.14+)."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from hf_gpt2_steps.model import Trainer, make_batch, make_model  # noqa: E402

__all__ = ["Trainer", "make_batch", "make_model", "precompile_status"]
