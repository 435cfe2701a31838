"""Three conv blocks with BatchNorm, a 5-class head: every BatchNorm tensor and the head's bias are
small enough that Inductor would fold them into its code, and a checkpoint changes all of them."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

import hatch_precompile


def block(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(inputs, outputs, 3, padding=1, bias=False), nn.BatchNorm2d(outputs), nn.ReLU())


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(block(3, 8), nn.MaxPool2d(2), block(8, 16), nn.MaxPool2d(2), block(16, 32),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(32, 5)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))


def make_model(seed: int = 0) -> ConvNet:
    torch.manual_seed(seed)
    return ConvNet()


def make_images(n: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def classify(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Class probabilities (served under no_grad, in eval())."""
    return model(images).softmax(-1)


@functools.lru_cache(maxsize=None)
def compiled() -> Any:
    return torch.compile(classify, dynamic=True)


def _fallback(model_or_weights: Any, images: torch.Tensor) -> torch.Tensor:
    """torch.compile of the step, with the model built where only its weights were given."""
    if isinstance(model_or_weights, Mapping):
        model = make_model()
        model.load_state_dict(model_or_weights)
        model_or_weights = model.eval()
    return compiled()(model_or_weights, images)


BATCHES = torch.export.Dim("batch", min=1, max=256)
classify_step = hatch_precompile.load_step("bn_convnet", "classify", classify, fallback=_fallback)
