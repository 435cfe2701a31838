"""transformers' GPT-2 from a config (the model and batch of gpt2_function and gpt2_module)."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel

VOCAB = 2048


def make_model():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=128, n_layer=2, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def make_batch():
    return torch.randint(0, VOCAB, (4, 64), generator=torch.Generator().manual_seed(1))

