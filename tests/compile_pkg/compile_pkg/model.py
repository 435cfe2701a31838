"""A model, a loss compiled at import, a closure compiled on demand: what the guards must keep apart."""

import functools
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from compile_pkg.wrapping import counted, scaled_output

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


def features(model: MLP, x: torch.Tensor) -> torch.Tensor:
    return model.net[0](x).tanh()


# The workload runs it with gradients on and never calls backward() on it: a training graph whose
# backward torch compiles lazily, at a first backward() only a user's call makes.
compiled_features = torch.compile(features)


def scaled_by(weights: torch.Tensor):
    def scaled_sum(x: torch.Tensor) -> torch.Tensor:
        return (x * weights).sum(-1)

    return scaled_sum


def scaled(weights: torch.Tensor):
    """The closure over ``weights``, compiled by the package (a new closure, same code, every call)."""
    return torch.compile(scaled_by(weights))


class Classifier(nn.Module):
    """Its loss chosen by a property whose getter breaks Dynamo's graph, as transformers' ``loss_function``
    does: the getter is compiled as a frame of its own, which torch's Dynamo cache cannot name alone."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(32, 10)

    @property
    def loss_function(self):
        torch._dynamo.graph_break()  # as a logger call in the getter would
        return F.cross_entropy

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss_function(self.head(x), y)


class Decorated(nn.Module):
    """Its forward wrapped twice by decorators of another module (compile_pkg/wrapping.py): the
    function the outer wrapper calls is found by no name, and the outer wrapper's globals are the
    other module's."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(32, 10)

    @counted
    @scaled_output(0.5)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x).relu()


def decorated(seed: int = 0):
    """The decorated module compiled by the package."""
    torch.manual_seed(seed)
    return torch.compile(Decorated())


def classifier(seed: int = 0):
    """The classifier compiled by the package."""
    torch.manual_seed(seed)
    return torch.compile(Classifier())


def doubled(fn):
    """A closure over a function, compiled by the package: Dynamo holds ``fn``'s code by identity, and
    the object is the call's (``L['fn']``), so a shipped entry holds it at each call to the code the
    first call with the build's code brought."""
    def apply(x: torch.Tensor) -> torch.Tensor:
        return fn(x) * 2

    return torch.compile(apply)


@torch.compile(dynamic=False)  # the decorator form, with an option
def normalized(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1) * 2


@torch.compile
def summary(x: torch.Tensor) -> OrderedDict:
    """Its result rebuilt by Dynamo's bytecode from the collections module, which this module does not
    hold under that name: Dynamo loads it by a global named from the module's address."""
    return OrderedDict(total=x.sum(), mean=x.mean())


def _cached_scale():
    @functools.lru_cache(maxsize=None)
    def scale(n: int) -> float:
        return 1.0 / n

    return scale


cached_scale = _cached_scale()


@torch.compile
def cached(x: torch.Tensor) -> torch.Tensor:
    """Calls a local function's lru_cache, which torch cannot save with the guards (it pickles the
    object): torch marks the entry bypassed, then fails the compile; the build lets it finish unserved."""
    return torch.tanh(x) * cached_scale(x.shape[-1])


def make(seed: int = 0) -> MLP:
    torch.manual_seed(seed)
    return MLP()


def batch(n: int = 8, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, 32, generator=generator), torch.randint(0, 10, (n,), generator=generator)


def predictor(model: MLP):
    """The model compiled by the package, for inference."""
    return torch.compile(model)
