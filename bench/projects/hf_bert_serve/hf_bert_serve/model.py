"""The model (built from a config, random weights: nothing is downloaded), its step, its requests."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch

import hatch_precompile

VOCAB, LAYERS, HIDDEN, HEADS, CLASSES = 1000, 2, 128, 2, 3


def make_model(seed: int = 0) -> Any:
    """BertForSequenceClassification from a config; imports transformers (the server never does)."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        intermediate_size=4 * HIDDEN, num_labels=CLASSES, max_position_embeddings=512)
    return BertForSequenceClassification(config).eval()


def classify(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The logits of a padded batch of token ids."""
    return model(input_ids=input_ids, attention_mask=attention_mask).logits


def make_request(batch: int = 3, length: int = 40, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length // 2:] = 0  # the first text is shorter: padded
    return ids, mask


def load_weights(path: str) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors (torch.save of the model's state_dict), without transformers."""
    return torch.load(path, weights_only=True)


@functools.lru_cache(maxsize=None)
def _compiled() -> Any:
    return torch.compile(classify, dynamic=True)


def _fallback(model_or_weights: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """torch.compile of the step, with the model built where only its weights were given."""
    if isinstance(model_or_weights, Mapping):
        model = make_model()
        model.load_state_dict(model_or_weights)
        model_or_weights = model
    return _compiled()(model_or_weights, input_ids, attention_mask)


BATCH = torch.export.Dim("batch", min=1, max=64)
LENGTH = torch.export.Dim("length", min=2, max=512)
classify_step = hatch_precompile.load_step("hf_bert_serve", "classify", classify, fallback=_fallback)
