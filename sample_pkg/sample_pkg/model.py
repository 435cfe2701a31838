"""The model, its shipped training step, its compiled inference call and its shipped classifier."""

from __future__ import annotations

import torch
from torch import nn

import hatch_precompile

IMAGE_SIZE = 28
NUM_CLASSES = 10
BATCH_SIZE = 32


class ConvNet(nn.Module):
    """Two conv blocks and a linear head for 1x28x28 images."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, NUM_CLASSES))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(flatten_features(self.features(images)))


def flatten_features(features: torch.Tensor) -> torch.Tensor:
    """A plain function Dynamo inlines into the compiled graphs (snoop and verify name it if it changes)."""
    return torch.flatten(features, 1)


def default_device() -> str:
    """The GPU when there is one. Asked at call time: asking at import would initialise CUDA."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def make_model(seed: int = 0, device: str | None = None) -> ConvNet:
    torch.manual_seed(seed)
    return ConvNet().to(device or default_device())


def make_batch(
    batch_size: int = BATCH_SIZE, seed: int = 0, device: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)  # on the CPU: the same numbers on every device
    images = torch.randn(batch_size, 1, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    labels = torch.randint(0, NUM_CLASSES, (batch_size,), generator=generator)
    device = device or default_device()
    return images.to(device), labels.to(device)


def training_loss(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss alone, no backward(): ``loss_step`` runs its forward and backward."""
    return nn.functional.cross_entropy(model(images), labels)


# Shipped as one AOTInductor package of the forward and backward (the workload saves it): a call
# leaves the gradients in .grad, as loss.backward() would, with no compiler in the process.
# Elsewhere it runs torch.compile(training_loss), then backward().
loss_step = hatch_precompile.load_step("sample_pkg", "loss", training_loss, backward=True)


class Trainer:
    """A model with an SGD optimizer: ``step`` trains through ``loss_step``, ``predict`` infers compiled."""

    def __init__(self, model: nn.Module, lr: float = 0.05) -> None:
        self.model = model
        self.compiled: nn.Module | None = None  # compiled at the first predict: training imports no compiler
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = loss_step(self.model, images, labels)  # the gradients are in .grad
        self.optimizer.step()
        return loss

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        if self.compiled is None:
            self.compiled = torch.compile(self.model)
        return self.compiled(images)


def classify(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Class probabilities: inference as served, under no_grad with the model in eval()."""
    return model(images).softmax(-1)


# Shipped as an AOTInductor package (the workload saves it): no compiler in the serving process.
classify_step = hatch_precompile.load_step("sample_pkg", "classify", classify, dynamic=True)
BATCH = torch.export.Dim("batch", min=1, max=1024)


def scripted_classifier(model: nn.Module | None = None) -> torch.jit.ScriptModule:
    """The shipped TorchScript export of the untrained classifier, or a fresh trace of ``model``."""
    shipped = hatch_precompile.load_torchscript("sample_pkg", "classifier")
    if shipped is not None and model is None:
        return shipped
    model = model if model is not None else make_model(device="cpu")
    return torch.jit.trace(model.eval(), make_batch(device=str(next(model.parameters()).device))[0])
