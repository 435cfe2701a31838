"""The models (from a config, random weights: nothing is downloaded), their steps, their requests."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

import hatch_precompile

VOCAB, CLASSES = 1000, 3


def make_bert(seed: int = 0, dropout: float | None = None) -> Any:
    """A 2-layer BertForSequenceClassification, as a fine-tuning script builds one from its config
    (transformers' default attention, SDPA); ``dropout`` replaces the config's 0.1 where given."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    rates = {} if dropout is None else {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, num_labels=CLASSES, max_position_embeddings=128, **rates)
    return BertForSequenceClassification(config).eval()


def bert_loss(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The fine-tuning loss of a padded batch: ``bert_loss_step`` runs its backward."""
    return model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss


def bert_training_step(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       labels: torch.Tensor) -> torch.Tensor:
    """A training step as most first ``torch.compile`` calls are: ``backward()`` inside, where Dynamo
    breaks the graph; the graph after it (``return loss.detach()``) has nothing to compute."""
    loss = bert_loss(model, input_ids, attention_mask, labels)
    loss.backward()
    return loss.detach()


@functools.lru_cache(maxsize=None)
def compiled_training_step() -> Any:
    return torch.compile(bert_training_step)


def classify(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The logits of a padded batch of token ids."""
    return model(input_ids=input_ids, attention_mask=attention_mask).logits


def requests(batch: int, length: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length // 2:] = 0  # the first text is shorter: padded
    return ids, mask


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(8, 5)  # 5 classes: a bias Inductor would fold into its code
        self.temperature = nn.Parameter(torch.tensor(0.0))  # 0-dim, and what is computed from it alone

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images)) * self.temperature.exp()


def make_convnet(seed: int = 0) -> ConvNet:
    torch.manual_seed(seed)
    return ConvNet().eval()


def predict(model: ConvNet, images: torch.Tensor) -> torch.Tensor:
    return model(images).softmax(-1)


BATCH = torch.export.Dim("batch", min=1, max=32)
LENGTH = torch.export.Dim("length", min=2, max=128)
bert_step = hatch_precompile.load_step(__package__, "bert", classify)
convnet_step = hatch_precompile.load_step(__package__, "convnet", predict)
bert_loss_step = hatch_precompile.load_step(__package__, "bert_loss", bert_loss, backward=True)
