"""``transformers``' own ``GPT2LMHeadModel`` from a ``GPT2Config``: random weights, no download.

Dropout is off so that a warm run's loss can be compared with a cold run's, number for number.
"""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

VOCAB, CONTEXT, WIDTH, HEADS, BATCH = 2048, 64, 256, 4, 4
SIZES = (2, 8)  # layers: the benchmark's two models; the workload compiles both


def make_model(layers: int = 2) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=WIDTH, n_layer=layers, n_head=HEADS,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


def make_batch() -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (BATCH, CONTEXT), generator=generator)


class Trainer:
    """A compiled language-model training step and a compiled no-grad forward, as users write them."""

    def __init__(self, model: GPT2LMHeadModel, lr: float = 1e-4) -> None:
        self.model = model
        self.compiled = torch.compile(model)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.compiled(input_ids=tokens, labels=tokens).loss
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    @torch.no_grad()
    def predict(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.compiled(input_ids=tokens).logits
