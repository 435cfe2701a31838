"""The ways users write torch.compile beside a plain call of it: a compiled optimizer step; a
module's own ``compile()`` returned to its user, who calls the module; inputs marked dynamic; another backend; regional
compilation, as a loop of ``block.compile()`` and as a library's (regional_lib, as diffusers'
``compile_repeated_blocks``); a module-level numpy array read as a tensor, whose guard torch fails
to create for saving (the build serves every other function)."""

import numpy as np
import regional_lib
import torch
import torch.nn.functional as F
from torch import nn

from compile_pkg.model import batch, make


def trained_by_compiled_step(seed: int = 0, optimizer_class=torch.optim.Adam, steps: int = 2) -> list[float]:
    """The package's model trained ``steps`` steps, its optimizer's step compiled (torch's tutorial):
    each parameter's sum after."""
    model = make(seed)
    optimizer = optimizer_class(model.parameters(), lr=torch.tensor(0.01))

    @torch.compile(fullgraph=False)
    def step() -> None:
        optimizer.step()

    x, y = batch()
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        step()
    return [p.double().sum().item() for p in model.parameters()]


def self_compiled(seed: int = 0):
    """The package's model, compiled by its own ``compile()`` and handed to the user."""
    model = make(seed)
    model.compile()
    return model


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.fc(x))


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def regional(seed: int = 0) -> Stack:
    """Each repeated block compiled by the package, the rest eager."""
    torch.manual_seed(seed)
    model = Stack()
    for block in model.blocks:
        block.compile()
    return model


def library_regional(seed: int = 0) -> Stack:
    """The same, compiled by a library's regional compile that the package calls."""
    torch.manual_seed(seed)
    return regional_lib.compile_repeated_blocks(Stack(), ("Block",))


def rows(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() * 2).sum(-1)


dynamic_rows = torch.compile(rows)  # called with its rows marked dynamic (torch._dynamo.mark_dynamic)


def shifted(x: torch.Tensor) -> torch.Tensor:
    return x.cos() + 1


aot_eager_shifted = torch.compile(shifted, backend="aot_eager")  # a backend whose graphs torch does not save

NP_SCALE = np.linspace(0.5, 1.5, 32, dtype=np.float32)


def numpy_scaled(x: torch.Tensor) -> torch.Tensor:
    return x * torch.from_numpy(NP_SCALE)


compiled_numpy_scaled = torch.compile(numpy_scaled)
