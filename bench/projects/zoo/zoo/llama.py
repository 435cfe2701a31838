"""transformers' Llama-architecture causal LM, a tiny config, compiled as a module by the package."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from zoo import compiled

VOCAB = 1024


def make_model():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


def make_batch():
    return torch.randint(0, VOCAB, (4, 32), generator=torch.Generator().manual_seed(1))


def train_step(model, ids, optimizer):
    return compiled.train_step(model, optimizer, input_ids=ids, labels=ids)


def infer(model, ids):
    return compiled.module(model)(input_ids=ids).logits
