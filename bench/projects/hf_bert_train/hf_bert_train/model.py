"""The model (from a config, random weights: nothing is downloaded), its loss step and its trainer.

Dropout is 0, so the shipped step's loss and gradients can be held to eager's. Attention is
transformers' default (SDPA).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import hatch_precompile

VOCAB, LAYERS, HIDDEN, HEADS, CLASSES = 1000, 2, 128, 2, 3


def make_model(seed: int = 0, attention: str = "sdpa") -> Any:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        intermediate_size=4 * HIDDEN, num_labels=CLASSES, max_position_embeddings=512,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation=attention)
    return BertForSequenceClassification(config).train()


def make_batch(batch: int = 8, length: int = 32, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids, their padding mask (every other text shorter) and labels."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[::2, length // 2:] = 0
    return ids, mask, torch.randint(0, CLASSES, (batch,), generator=generator)


def training_loss(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss alone, no backward(): ``loss_step`` runs its forward and backward."""
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss


loss_step = hatch_precompile.load_step("hf_bert_train", "loss", training_loss, backward=True)
BATCH = torch.export.Dim("batch", min=2, max=64)
LENGTH = torch.export.Dim("length", min=2, max=512)


class Trainer:
    """AdamW fine-tuning through ``loss_step``; ``predict`` compiles at its first call."""

    def __init__(self, model: nn.Module, lr: float = 5e-5) -> None:
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        self.compiled: nn.Module | None = None

    def step(self, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = loss_step(self.model, ids, mask, labels)
        self.optimizer.step()
        return loss

    @torch.no_grad()
    def predict(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.compiled is None:
            self.compiled = torch.compile(self.model)
        return self.compiled(input_ids=ids, attention_mask=mask).logits
