"""The compile styles: ``CASES[name](size)`` makes what the style compiles, makes its first call at
``size`` rows (the workload's 8, or the user's own), and returns the seconds that call took and
what it computed (a float to compare with a cold compile's)."""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 128)
        self.b = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.gelu(self.a(x)))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.fc = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.fc(self.norm(x)))


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(4)])
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _inputs(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(size)
    return torch.randn(size, 64, generator=generator), torch.randint(0, 10, (size,), generator=generator)


def _timed(call) -> tuple[float, float]:
    began = time.perf_counter()
    out = call()
    return time.perf_counter() - began, float(out)


def _trained(make_optimizer, scheduled: bool = False):
    """A model with its gradients, its optimizer, and the optimizer's LR scheduler, or None."""
    torch.manual_seed(0)
    model = Net()
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=5) if scheduled else None
    return model, optimizer, scheduler


def _stepped(size: int, model, step) -> tuple[float, float]:
    x, y = _inputs(size)
    F.cross_entropy(model(x), y).backward()
    seconds, _ = _timed(lambda: step() or 0.0)
    return seconds, sum(p.double().sum().item() for p in model.parameters())


# torch's tutorial: the optimizer's step compiled, the forward and backward eager; one step
# function each, as a program has one (two compiles of one function for two optimizer classes
# save the same guards, which no new process can tell apart: traced, and the build says so).
def adam_step(size: int) -> tuple[float, float]:
    model, optimizer, _ = _trained(lambda p: torch.optim.Adam(p, lr=torch.tensor(0.01)))

    @torch.compile(fullgraph=False)
    def step() -> None:
        optimizer.step()

    return _stepped(size, model, step)


def sgd_step(size: int) -> tuple[float, float]:
    model, optimizer, _ = _trained(lambda p: torch.optim.SGD(p, lr=torch.tensor(0.01), momentum=0.9))

    @torch.compile(fullgraph=False)
    def step() -> None:
        optimizer.step()

    return _stepped(size, model, step)


def scheduled_adam_step(size: int) -> tuple[float, float]:
    model, optimizer, scheduler = _trained(lambda p: torch.optim.Adam(p, lr=torch.tensor(0.01)), scheduled=True)

    @torch.compile(fullgraph=False)
    def step() -> None:
        optimizer.step()
        scheduler.step()

    return _stepped(size, model, step)


def module_compile(size: int) -> tuple[float, float]:
    """``model.compile()``, the model returned to the user, who calls it."""
    torch.manual_seed(0)
    model = Net()
    model.compile()
    x, _ = _inputs(size)
    return _timed(lambda: model(x).sum())


def rows(x: torch.Tensor) -> torch.Tensor:
    return (F.gelu(x) * 2).sum(-1)


compiled_rows = torch.compile(rows)


def mark_dynamic(size: int) -> tuple[float, float]:
    """The caller marks the rows dynamic (``torch._dynamo.mark_dynamic``), as a server batching requests does."""
    x, _ = _inputs(size)
    torch._dynamo.mark_dynamic(x, 0)
    return _timed(lambda: compiled_rows(x).sum())


def shifted(x: torch.Tensor) -> torch.Tensor:
    return (x.cos() + 1).sum(-1)


def tanh_scaled(x: torch.Tensor) -> torch.Tensor:
    return (x.tanh() * 3).sum(-1)


def relu_mean(x: torch.Tensor) -> torch.Tensor:
    return F.relu(x @ x.T).mean(-1)


BACKENDS = {"aot_eager": torch.compile(shifted, backend="aot_eager"),
            "reduce-overhead": torch.compile(tanh_scaled, mode="reduce-overhead"),
            "max-autotune-no-cudagraphs": torch.compile(relu_mean, mode="max-autotune-no-cudagraphs")}


def _backend(name: str):
    def case(size: int) -> tuple[float, float]:
        x, _ = _inputs(size)
        return _timed(lambda: BACKENDS[name](x).sum())

    return case


def regional_loop(size: int) -> tuple[float, float]:
    """Regional compilation as torch's recipe writes it: each repeated block's ``compile()``."""
    torch.manual_seed(0)
    model = Stack()
    for block in model.blocks:
        block.compile()
    x, _ = _inputs(size)
    return _timed(lambda: model(x).sum())


def diffusers_regional(size: int) -> tuple[float, float]:
    """diffusers' ``compile_repeated_blocks()`` on a tiny Flux transformer made from a config."""
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=8, num_layers=1, num_single_layers=2,
                                   attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                   pooled_projection_dim=16, axes_dims_rope=(2, 2, 4)).eval()
    model.compile_repeated_blocks()
    generator = torch.Generator().manual_seed(size)
    inputs = dict(hidden_states=torch.randn(1, size, 8, generator=generator),
                  encoder_hidden_states=torch.randn(1, 4, 16, generator=generator),
                  pooled_projections=torch.randn(1, 16, generator=generator), timestep=torch.tensor([0.5]),
                  img_ids=torch.zeros(size, 3), txt_ids=torch.zeros(4, 3), return_dict=False)
    with torch.no_grad():
        return _timed(lambda: model(**inputs)[0].sum())


NP_SCALE = np.linspace(0.5, 1.5, 64, dtype=np.float32)


def numpy_scaled(x: torch.Tensor) -> torch.Tensor:
    return (x * torch.from_numpy(NP_SCALE)).sum(-1)


compiled_numpy_scaled = torch.compile(numpy_scaled)


def numpy_global(size: int) -> tuple[float, float]:
    """A function reading a module-level numpy array (``torch.from_numpy(NP_SCALE)``)."""
    x, _ = _inputs(size)
    return _timed(lambda: compiled_numpy_scaled(x).sum())


def softplus_rows(x: torch.Tensor) -> torch.Tensor:
    return F.softplus(x).sum(-1)


compiled_softplus = torch.compile(softplus_rows)


def automatic_dynamic(size: int) -> tuple[float, float]:
    """A plain compile called at a size its workload never used, after the workload's two sizes
    made torch compile it with dynamic rows (automatic dynamic shapes)."""
    x, _ = _inputs(size)
    return _timed(lambda: compiled_softplus(x).sum())


CASES = {
    "optimizer step (Adam)": adam_step,
    "optimizer step (SGD)": sgd_step,
    "optimizer step (Adam with an LR scheduler)": scheduled_adam_step,
    "model.compile() returned": module_compile,
    "mark_dynamic inputs": mark_dynamic,
    "backend aot_eager": _backend("aot_eager"),
    "mode reduce-overhead": _backend("reduce-overhead"),
    "mode max-autotune-no-cudagraphs": _backend("max-autotune-no-cudagraphs"),
    "regional: a loop of block.compile()": regional_loop,
    "regional: diffusers compile_repeated_blocks": diffusers_regional,
    "a module-level numpy array": numpy_global,
    "automatic dynamic: a size the workload never used": automatic_dynamic,
}
# What the workload compiled with which functions: the one style's functions, for served() in the table.
FUNCTIONS = {
    "optimizer step (Adam)": "adam_step.<locals>.step", "optimizer step (SGD)": "sgd_step.<locals>.step",
    "optimizer step (Adam with an LR scheduler)": "scheduled_adam_step.<locals>.step",
    "model.compile() returned": "Module._call_impl", "mark_dynamic inputs": "rows", "backend aot_eager": "shifted",
    "mode reduce-overhead": "tanh_scaled", "mode max-autotune-no-cudagraphs": "relu_mean",
    "regional: a loop of block.compile()": "Module._call_impl",
    "regional: diffusers compile_repeated_blocks": "Module._call_impl", "a module-level numpy array": "numpy_scaled",
    "automatic dynamic: a size the workload never used": "softplus_rows",
}


def available(name: str) -> bool:
    if name == "regional: diffusers compile_repeated_blocks":
        try:
            import diffusers  # noqa: F401
        except Exception:
            return False
    return True
