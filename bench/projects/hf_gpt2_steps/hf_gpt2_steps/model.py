"""``transformers``' ``GPT2LMHeadModel`` from a ``GPT2Config`` (random weights, no download), as
``hf_gpt2`` builds it, with the training step and the forward declared with ``load_step()``.

Three changes let ``torch.compiler.precompile`` capture it (docs/benchmarks/speed.md): eager attention and an
explicit all-ones attention mask (SDPA's mask helpers read tensor values, which a trace cannot),
and ``use_cache=False`` (empty KV-cache tensors would be baked in). Dropout is off, as in hf_gpt2.
"""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import hatch_precompile

VOCAB, CONTEXT, WIDTH, HEADS, BATCH = 2048, 64, 256, 4, 4


def make_model(layers: int = 2) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=WIDTH, n_layer=layers, n_head=HEADS,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    model.set_attn_implementation("eager")
    return model


def make_batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, CONTEXT), generator=generator)
    return tokens, torch.ones_like(tokens)


def training_step(model: GPT2LMHeadModel, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    loss = model(input_ids=tokens, labels=tokens, attention_mask=mask, use_cache=False).loss
    loss.backward()
    return loss.detach()


def forward(model: GPT2LMHeadModel, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=tokens, attention_mask=mask, use_cache=False).logits


train_step = hatch_precompile.load_step(__package__, "train_step", training_step)
predict = hatch_precompile.load_step(__package__, "predict", forward)


class Trainer:
    """A language-model training step (forward, loss, backward, AdamW) and a no-grad forward."""

    def __init__(self, model: GPT2LMHeadModel, lr: float = 1e-4) -> None:
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    def step(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = train_step(self.model, tokens, mask)
        self.optimizer.step()
        return loss

    def predict(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return predict(self.model, tokens, mask)
