"""A tiny Llama from a config (nothing downloaded) and greedy generation with a static cache: the
only torch.compile is the one transformers makes inside generate() (``get_compiled_call``)."""

from __future__ import annotations

import torch
from transformers import CompileConfig, LlamaConfig, LlamaForCausalLM


def make_model(seed: int = 0, **config) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    settings = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM(LlamaConfig(**{**settings, **config})).eval()


def prompt(batch: int = 1, length: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, 256, (batch, length), generator=torch.Generator().manual_seed(seed))


def generate(model: LlamaForCausalLM, ids: torch.Tensor, new: int = 8, **options) -> torch.Tensor:
    config = CompileConfig(mode="default")
    config._compile_all_devices = True  # transformers compiles on CUDA only, unless told so
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=new, do_sample=False, cache_implementation="static",
                              pad_token_id=0, compile_config=config, **options)
