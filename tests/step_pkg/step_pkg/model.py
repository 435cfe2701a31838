"""The model and its steps, as a package author writes them with load_step()."""

import torch
import torch.nn.functional as F
from torch import nn

import hatch_precompile


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_model(seed: int = 0) -> MLP:
    torch.manual_seed(seed)
    return MLP()


def make_batch(n: int = 16, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, 32, generator=generator), torch.randint(0, 10, (n,), generator=generator)


def training_step(model: MLP, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach()


def forward(model: MLP, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x)


def classify(model: MLP, x: torch.Tensor) -> torch.Tensor:
    """Inference as served: called under no_grad with the model in eval() (the exported route)."""
    return model(x).softmax(-1)


class Tagger(nn.Module):
    """Trained through the exported joint graph: a frozen embedding layer, BatchNorm, a 3-class head."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 48), nn.BatchNorm1d(48), nn.ReLU(), nn.LayerNorm(48))
        self.head = nn.Linear(48, 3)
        self.body[0].weight.requires_grad_(False)  # frozen: no gradient, as in fine-tuning

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def make_tagger(seed: int = 0) -> Tagger:
    torch.manual_seed(seed)
    return Tagger()


def tagging_loss(model: Tagger, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The loss alone: load_step(..., backward=True) runs its backward (the exported joint graph)."""
    return F.cross_entropy(model(x), y % 3)


BATCH = torch.export.Dim("batch", min=1, max=256)
TRAIN_BATCH = torch.export.Dim("train_batch", min=2, max=256)  # BatchNorm in train() needs two
train_step = hatch_precompile.load_step(__package__, "train_step", training_step)
predict = hatch_precompile.load_step(__package__, "predict", forward)
classify_step = hatch_precompile.load_step(__package__, "classify", classify)
loss_step = hatch_precompile.load_step(__package__, "loss", tagging_loss, backward=True)
