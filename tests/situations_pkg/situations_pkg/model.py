"""The package's compiled functions. A situation that decides when a function first runs (a hook present
then, a variable set then) has a function of its own, so that no other situation of the same process
ran it first."""

from __future__ import annotations

import copy
import dataclasses
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from situations_pkg import config, knobs

WIDTH = 16
TABLE = torch.linspace(0.5, 1.5, WIDTH)  # a global tensor a compiled function reads


def batch(n: int = 8, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, WIDTH, generator=generator), torch.randint(0, 8, (n,), generator=generator)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(WIDTH, WIDTH)
        self.b = nn.Linear(WIDTH, 8)
        self.scale = 1.0  # a plain attribute the forward reads

    def act(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.act(self.a(x))) * self.scale


# Each with a forward of its own, for a situation that decides its first run.
class Encoder(Block):  # a forward hook on a submodule
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.act(self.a(x))) * self.scale


class Decoder(Block):  # a backward hook on a submodule
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.act(self.a(x))) * self.scale


class Stem(Block):  # a hook registered after its first call
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.act(self.a(x))) * self.scale


class Tuned(Block):  # an adapter swapped in for a submodule
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.act(self.a(x))) * self.scale


class Threaded(Block):  # the thread count set after the package's import
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.act(self.a(x))) * self.scale


def make(cls: type[Block] = Block, seed: int = 0) -> Block:
    torch.manual_seed(seed)
    knobs.SCALES.setdefault(cls, 1.0 + len(knobs.SCALES))
    return cls()


def predictor(model: Block):
    """The model compiled by the package."""
    return torch.compile(model)


def loss_fn(model: Block, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


compiled_loss = torch.compile(loss_fn)  # at import, as packages do


def scaled_by(weights: torch.Tensor):
    def scaled_sum(x: torch.Tensor) -> torch.Tensor:
        return (x * weights).sum(-1)

    return scaled_sum


def scaled(weights: torch.Tensor):
    """A closure over ``weights``, compiled by the package."""
    return torch.compile(scaled_by(weights))


def shifted_table(x: torch.Tensor, k: float = 2.0) -> torch.Tensor:
    return x * TABLE + k


table_shifted = torch.compile(shifted_table)


def dropout_sin(x: torch.Tensor) -> torch.Tensor:
    return F.dropout(x, 0.5, training=True) + x.sin()


dropped = torch.compile(dropout_sin)


def square_sum(x: torch.Tensor) -> torch.Tensor:
    return (x * x).sum()


squares = torch.compile(square_sum)


@dataclasses.dataclass
class Settings:
    scale: float = 1.0
    center: bool = True


def configured(x: torch.Tensor, settings: Settings) -> torch.Tensor:
    y = x * settings.scale
    return y - y.mean() if settings.center else y


compiled_configured = torch.compile(configured)


class StrictSettings(Settings):
    """A subclass: a function that asks its settings' class computes otherwise with it."""


def by_kind(x: torch.Tensor, settings: Settings) -> torch.Tensor:
    # type(...) is ...: Dynamo holds the class (CLASS_MATCH), which torch cannot save with the entry
    return x * settings.scale * (1.0 if type(settings) is Settings else -1.0)


compiled_by_kind = torch.compile(by_kind)


@dataclasses.dataclass
class Options:
    """Options a compiled function deep-copies, as transformers' T5 copies its config in ``forward``."""

    weights: list = dataclasses.field(default_factory=lambda: [1.0, 2.0])
    shifts: list = dataclasses.field(default_factory=lambda: [1.0, 2.0])


def copied_options(x: torch.Tensor, options: Options) -> torch.Tensor:
    made = copy.deepcopy(options)  # its memo takes id() of each object: Dynamo guards their identities
    made.weights[0] = 3.0  # where the two lists are one, the copy's are one too
    return x * made.weights[0] + made.shifts[0]


compiled_copied = torch.compile(copied_options)


def registered_scale(x: torch.Tensor) -> torch.Tensor:
    for scale in knobs.SCALES.values():  # read by position: torch rebuilds this guard only once a model is made
        x = x * scale
    return x


registered = torch.compile(registered_scale)  # at import, before any model is made


def apply(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).sum(-1)


applied = torch.compile(apply)  # a model passed in: a hook on it


def apply_all(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).sum(-1)


applied_all = torch.compile(apply_all)  # a global hook


def activate(x: torch.Tensor) -> torch.Tensor:
    return getattr(F, config.ACTIVATION)(x) * config.SCALE


activated = torch.compile(activate)


def from_environ(x: torch.Tensor) -> torch.Tensor:
    return x * float(os.environ.get("SITUATIONS_FACTOR", "1"))


environ_scaled = torch.compile(from_environ)


def from_environ_late(x: torch.Tensor) -> torch.Tensor:
    return x * float(os.environ.get("SITUATIONS_LATE_FACTOR", "1"))


environ_late = torch.compile(from_environ_late)


def world_scaled(x: torch.Tensor) -> torch.Tensor:
    return x * (2.0 if dist.is_available() and dist.is_initialized() else 1.0)


world = torch.compile(world_scaled)


def debug_scaled(x: torch.Tensor) -> torch.Tensor:
    if __debug__:  # gone from the bytecode under python -O
        x = x * 2
    return x + 1


debugged = torch.compile(debug_scaled)


def resample(x: torch.Tensor) -> torch.Tensor:
    return F.dropout(x, 0.5, training=True) * 2


resampled = torch.compile(resample)  # Inductor's settings changed after import


def config_scaled(x: torch.Tensor) -> torch.Tensor:  # compiled at first use: installed at this module's import
    return x * config.SCALE


def shift(x: torch.Tensor) -> torch.Tensor:
    return x + knobs.SHIFT


def bias(x: torch.Tensor) -> torch.Tensor:
    return x + 1.0 if knobs.BIAS else x


_compiled: dict = {}


def on_first_use(fn):
    """``fn`` compiled by the package the first time it is asked for, as lazy packages do."""
    if fn not in _compiled:
        _compiled[fn] = torch.compile(fn)
    return _compiled[fn]


# Torch's compile controls (stances, the recompile limit, resets), and worker threads. Each function
# computes otherwise where Dynamo compiles it (as transformers' is_torchdynamo_compiling() branches
# do), so that a call a shipped guarded code ran where torch would have run it eagerly shows; each
# has a code of its own (a situation decides its first run), and the workload compiles it at two
# batch sizes (SIZES), a guarded code each.
SIZES = (8, 4)


def eager_then_compile(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


def stance_context(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


def eager_on_recompile(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


def stance_decorator(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


def recompile_limit(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


def limit_lowered_after(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


def fail_on_recompile(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


def skip_guard_eval(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


def force_eager_then_default(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


def first_from_worker(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


def pooled(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


def patched_in_thread(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + (1.0 if torch.compiler.is_compiling() else 0.0)


CONTROLLED = {fn.__name__: torch.compile(fn, dynamic=False) for fn in (
    eager_then_compile, stance_context, eager_on_recompile, stance_decorator, recompile_limit, limit_lowered_after, fail_on_recompile, skip_guard_eval, force_eager_then_default, first_from_worker, pooled, patched_in_thread)}


def forced(x: torch.Tensor) -> torch.Tensor:  # a forced backend: Inductor's random numbers are not eager's
    return F.dropout(x, 0.5, training=True) * 2


compiled_forced = torch.compile(forced)


def reset_read(x: torch.Tensor) -> torch.Tensor:  # a reset, then a variable its trace reads set
    return x * float(os.environ.get("SITUATIONS_RESET_FACTOR", "1"))


def dynamo_reset_read(x: torch.Tensor) -> torch.Tensor:
    return x * float(os.environ.get("SITUATIONS_DYNAMO_RESET_FACTOR", "1"))


def code_caches_read(x: torch.Tensor) -> torch.Tensor:
    return x * float(os.environ.get("SITUATIONS_CODE_CACHES_FACTOR", "1"))


reset_scaled = torch.compile(reset_read)
dynamo_reset_scaled = torch.compile(dynamo_reset_read)
code_caches_scaled = torch.compile(code_caches_read)
