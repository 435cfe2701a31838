"""A model, a loss compiled at import, a closure compiled on demand: what the guards must keep apart."""

import torch
import torch.nn.functional as F
from torch import nn

LABEL_SMOOTHING = 0.0  # a global the compiled loss reads
CONFIG = {"temperature": 1.0}  # a global dict it reads


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Dropout(0.0), nn.Linear(64, 10))
        self.scale = 1.0  # a plain attribute the forward reads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) * self.scale


def loss_fn(model: MLP, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x) / CONFIG["temperature"], y, label_smoothing=LABEL_SMOOTHING)


compiled_loss = torch.compile(loss_fn)  # at import, as packages do


def scaled_by(weights: torch.Tensor):
    def scaled_sum(x: torch.Tensor) -> torch.Tensor:
        return (x * weights).sum(-1)

    return scaled_sum


def scaled(weights: torch.Tensor):
    """The closure over ``weights``, compiled by the package (a new closure, same code, every call)."""
    return torch.compile(scaled_by(weights))


@torch.compile(dynamic=False)  # the decorator form, with an option
def normalized(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1) * 2


def make(seed: int = 0) -> MLP:
    torch.manual_seed(seed)
    return MLP()


def batch(n: int = 8, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, 32, generator=generator), torch.randint(0, 10, (n,), generator=generator)


def predictor(model: MLP):
    """The model compiled by the package, for inference."""
    return torch.compile(model)
