"""A tiny Llama from a config (nothing downloaded) and greedy generation with a static cache: the only
torch.compile is the one transformers makes inside generate() (``PreTrainedModel.get_compiled_call``)."""

from __future__ import annotations

import torch
from transformers import CompileConfig, LlamaConfig, LlamaForCausalLM

SETTINGS = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, max_position_embeddings=64)


def make_model(seed: int = 0, **config) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**{**SETTINGS, **config})).eval()


def prompt(batch: int = 1, length: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, SETTINGS["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


def compile_config(**options) -> CompileConfig:
    config = CompileConfig(**{"mode": "default", **options})
    config._compile_all_devices = True  # transformers compiles on CUDA only, unless told so
    return config


def generate(model: LlamaForCausalLM, ids: torch.Tensor, new: int = 4, config: CompileConfig | None = None,
             **options) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=new, do_sample=options.pop("do_sample", False),
                              cache_implementation="static", pad_token_id=0,
                              compile_config=config or compile_config(), **options)
