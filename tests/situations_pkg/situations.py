"""The situations of tests/integration/test_served_situations.py, one group per process.

    python situations.py GROUP

runs GROUP's situations here in turn (each puts back what it changed), and prints one JSON line:
for each situation, how many frames Dynamo traced for it and what it computed (outputs, losses,
gradients), then what became of each compiled function (``served()``) and what ``load()`` said.
Run once with the package's shipped entries and once with ``PRECOMPILE=0`` (a cold compile), the
two must compute the same.
"""

import contextlib
import json
import os
import sys

GROUP = sys.argv[1]
if GROUP == "environment":  # set before the package is imported: its config reads them then
    os.environ.update(SITUATIONS_SCALE="2.0", SITUATIONS_ACTIVATION="gelu", SITUATIONS_FACTOR="3")

import collections  # noqa: E402
import hashlib  # noqa: E402
import pathlib  # noqa: E402

from hatch_precompile.run.torch_internals.served import entry_pickle  # noqa: E402

ENTRY_READS = collections.Counter()  # how many times each shipped entry's pickle is read, by its digest
_read = entry_pickle.loads


def _counted(data):
    ENTRY_READS[hashlib.sha256(data).hexdigest()] += 1
    return _read(data)


entry_pickle.loads = _counted

import situations_pkg  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from situations_pkg import knobs  # noqa: E402
from situations_pkg import model as M  # noqa: E402
from torch import nn  # noqa: E402
from torch._dynamo.utils import get_compilation_metrics  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from hatch_precompile.run.served import served_compile  # noqa: E402

results = {}
x, y = M.batch()


def frames() -> int:
    return sum(1 for m in get_compilation_metrics() if m.co_name)


def kernels() -> int:
    """How many kernels are built in this process's Inductor cache dir."""
    return sum(1 for _ in pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).rglob("*.so"))


compiled_kernels = {}


def situation(run):
    """Record what ``run`` computed, how many frames Dynamo traced for it and how many kernels it
    compiled, under its docstring."""
    before, built = frames(), kernels()
    out = run()
    results[run.__doc__] = [frames() - before, [float(v) for v in out]]
    compiled_kernels[run.__doc__] = kernels() - built
    return run


def values(*tensors):
    return [t.double().sum().item() for t in tensors] + [t.double().abs().sum().item() for t in tensors]


def grads(model):
    return [p.grad.double().sum().item() for p in model.parameters() if p.grad is not None]


def trained(model, xs=x, ys=y):
    loss = M.compiled_loss(model, xs, ys)
    loss.backward()
    return [loss.item()] + grads(model)


def through(compiled_module, model):
    out = compiled_module(x)
    out.sum().backward()
    return values(out) + grads(model)


@contextlib.contextmanager
def setting(owner, name, value):
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


class LowRank(nn.Module):
    """An adapter over a linear layer, as PEFT's LoRA injects one."""

    def __init__(self, base: nn.Linear, rank: int = 2) -> None:
        super().__init__()
        self.base = base
        self.down = nn.Parameter(torch.full((rank, base.in_features), 0.1))
        self.up = nn.Parameter(torch.full((base.out_features, rank), 0.2))

    def forward(self, x):
        return self.base(x) + x @ self.down.T @ self.up.T


class Sharper(M.Block):
    def act(self, x):
        return F.relu(x)


class Doubling(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 2 if func is torch.Tensor.sum else out


def right():
    """What was right before: served where Dynamo's guards hold, traced where they do not."""

    @situation
    def _():
        """first call"""
        return trained(M.make())

    @situation
    def _():
        """Dynamo's cache size limit raised before a first call"""
        with setting(torch._dynamo.config, "cache_size_limit", 64):
            return values(M.compiled_configured(x, M.Settings()))

    @situation
    def _():
        """a registry filled as models are made, read by a function compiled at import"""
        return values(M.registered(x))

    @situation
    def _():
        """another model instance"""
        return trained(M.make(seed=5))

    @situation
    def _():
        """a model from a checkpoint"""
        source, net = M.make(seed=7), M.make()
        net.load_state_dict(source.state_dict())
        return trained(net)

    @situation
    def _():
        """a trained model"""
        net = M.make(seed=2)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(3):
            optimizer.zero_grad()
            M.loss_fn(net, x, y).backward()
            optimizer.step()
        optimizer.zero_grad()
        return trained(net)

    @situation
    def _():
        """a compiled module, another instance"""
        net = M.make(seed=3)
        return through(M.predictor(net), net)

    @situation
    def _():
        """the package's model compiled by the user, its entry installed at the module's import"""
        net = M.make(seed=3)
        return through(torch.compile(net), net)

    @situation
    def _():
        """a closure over another tensor"""
        return values(M.scaled(torch.arange(16.0))(x))

    @situation
    def _():
        """a global tensor mutated in place"""
        M.TABLE.mul_(2)
        try:
            return values(M.table_shifted(x))
        finally:
            M.TABLE.div_(2)

    @situation
    def _():
        """a global tensor replaced"""
        with setting(M, "TABLE", torch.full((M.WIDTH,), 3.0)):
            return values(M.table_shifted(x))

    @situation
    def _():
        """a function's __defaults__ changed"""
        with setting(M.shifted_table, "__defaults__", (5.0,)):
            return values(M.table_shifted(x))

    @situation
    def _():
        """a library function monkeypatched"""
        real = F.gelu
        with setting(F, "gelu", lambda t, approximate="none": real(t) * 2):
            return trained(M.make())

    @situation
    def _():
        """a subclass overriding a method"""
        net = M.make(Sharper)
        return through(M.predictor(net), net)

    @situation
    def _():
        """a config object passed in, the same values"""
        return values(M.compiled_configured(x, M.Settings()))

    @situation
    def _():
        """a config object passed in, other values"""
        return values(M.compiled_configured(x, M.Settings(scale=2.0, center=False)))

    @situation
    def _():
        """code that asks its config's class, the same class"""
        return values(M.compiled_by_kind(x, M.Settings()))

    @situation
    def _():
        """code that asks its config's class, a subclass"""
        return values(M.compiled_by_kind(x, M.StrictSettings()))

    @situation
    def _():
        """options deep-copied in the compiled region, another instance"""
        return values(M.compiled_copied(x, M.Options()))

    @situation
    def _():
        """options deep-copied in the compiled region, two of their lists one and the same"""
        same = [1.0, 2.0]
        return values(M.compiled_copied(x, M.Options(weights=same, shifts=same)))

    @situation
    def _():
        """another dtype"""
        return trained(M.make().double(), x.double())

    @situation
    def _():
        """the default dtype"""
        torch.set_default_dtype(torch.float64)
        try:
            return values(M.squares(x))
        finally:
            torch.set_default_dtype(torch.float32)

    @situation
    def _():
        """autocast"""
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return values(M.predictor(M.make())(x))

    @situation
    def _():
        """no_grad"""
        with torch.no_grad():
            return values(M.predictor(M.make())(x))

    @situation
    def _():
        """inference_mode"""
        with torch.inference_mode():
            return values(M.predictor(M.make())(x))

    @situation
    def _():
        """deterministic algorithms"""
        torch.use_deterministic_algorithms(True)
        try:
            return values(M.squares(x))
        finally:
            torch.use_deterministic_algorithms(False)

    @situation
    def _():
        """a TorchFunctionMode"""
        with Doubling():
            return values(M.squares(x))

    @situation
    def _():
        """vmap"""
        return values(torch.vmap(M.squares)(x))

    @situation
    def _():
        """seeded RNG and dropout"""
        torch.manual_seed(3)
        first = M.dropped(x)
        return values(first, M.dropped(x))

    @situation
    def _():
        """a module imported under another name"""
        import situations_pkg.model as renamed

        return trained(renamed.make(seed=4))

    @situation
    def _():
        """the same function compiled again by the user, with another backend"""
        calls = []

        def counting(graph, inputs):
            calls.append(1)
            return graph.forward

        net = M.make()
        loss = torch.compile(M.loss_fn, backend=counting)(net, x, y)
        loss.backward()
        return [loss.item(), len(calls)] + grads(net)

    @situation
    def _():
        """the package's compile of it still served after"""
        return trained(M.make(seed=6))

    @situation
    def _():
        """under the profiler"""
        with torch.profiler.profile():
            return trained(M.make(seed=8))

    @situation
    def _():
        """a hook registered after the first call"""
        net = M.make(M.Stem)
        compiled = M.predictor(net)
        first = compiled(x)
        net.a.register_forward_hook(lambda module, inputs, output: output * 10)
        return values(first, compiled(x))

    @situation
    def _():
        """another thread count"""
        threads = torch.get_num_threads()
        torch.set_num_threads(8)
        try:
            return trained(M.make(seed=9))
        finally:
            torch.set_num_threads(threads)


def environment():
    """Set from the environment before the package's import."""

    @situation
    def _():
        """a config read from the environment at import (a float, and the name of an activation)"""
        return values(M.activated(x))

    @situation
    def _():
        """a config read from the environment at import, by a function the package compiles at its first use"""
        return values(M.on_first_use(M.config_scaled)(x))

    @situation
    def _():
        """os.environ read while traced, the variable set before import"""
        return values(M.environ_scaled(x))

    @situation
    def _():
        """a function that reads neither"""
        return values(M.squares(x))


def after_import():
    """Changed after the package's import, before the first call."""

    @situation
    def _():
        """os.environ read while traced, the variable set after import"""
        os.environ["SITUATIONS_LATE_FACTOR"] = "3"
        return values(M.environ_late(x))

    @situation
    def _():
        """a module attribute set before the package's first use (a float)"""
        knobs.SHIFT = 2.0
        return values(M.on_first_use(M.shift)(x))

    @situation
    def _():
        """a module attribute set before the package's first use (a bool)"""
        knobs.BIAS = False
        return values(M.on_first_use(M.bias)(x))

    @situation
    def _():
        """the thread count set after the package's import, before it compiles a model"""
        threads = torch.get_num_threads()
        torch.set_num_threads(threads + 1)
        try:
            net = M.make(M.Threaded)
            return through(M.predictor(net), net)
        finally:
            torch.set_num_threads(threads)

    @situation
    def _():
        """Inductor's settings changed after import"""
        torch._inductor.config.fallback_random = True
        torch.manual_seed(0)
        return values(M.resampled(x))


def hooks():
    """Hooks present at a function's first call."""

    @situation
    def _():
        """a forward hook on a submodule of the compiled module"""
        net = M.make(M.Encoder)
        net.a.register_forward_hook(lambda module, inputs, output: output * 10)
        return through(M.predictor(net), net)

    @situation
    def _():
        """a backward hook on a submodule"""
        net = M.make(M.Decoder)
        net.a.register_full_backward_pre_hook(lambda module, grad_output: (grad_output[0] * 3,))
        return through(M.predictor(net), net)

    @situation
    def _():
        """a forward hook on a model passed to a compiled function"""
        net = M.make()
        net.register_forward_hook(lambda module, inputs, output: output + 5)
        out = M.applied(net, x)
        out.sum().backward()
        return values(out) + grads(net)

    @situation
    def _():
        """an adapter swapped in for a submodule"""
        net = M.make(M.Tuned)
        net.a = LowRank(net.a)
        return through(M.predictor(net), net)

    @situation
    def _():
        """a global forward hook"""
        handle = nn.modules.module.register_module_forward_hook(
            lambda module, inputs, output: output * 2 if isinstance(module, nn.Linear) else output)
        try:
            net = M.make()
            out = M.applied_all(net, x)
            out.sum().backward()
            return values(out) + grads(net)
        finally:
            handle.remove()


def optimized():
    """Python -O: asserts and ``if __debug__:`` gone from the bytecode."""

    @situation
    def _():
        """python -O, a function with an if __debug__ branch"""
        return values(M.debugged(x))

    @situation
    def _():
        """python -O, a function without one"""
        return values(M.squares(x))


def distributed():
    """A process group initialised before the first call (gloo, one rank)."""
    import socket

    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        @situation
        def _():
            """a function that asks whether a process group is initialised"""
            return values(M.world(x))

        @situation
        def _():
            """a function that does not ask"""
            return values(M.squares(x))
    finally:
        dist.destroy_process_group()


def controls():
    """Torch's own controls over when and how a compile runs: stances, the recompile limit, resets."""
    big, small = M.batch(M.SIZES[0])[0], M.batch(M.SIZES[1])[0]
    C = M.CONTROLLED

    @contextlib.contextmanager
    def stance(*args, **kwargs):
        torch.compiler.set_stance(*args, **kwargs)
        try:
            yield
        finally:
            torch.compiler.set_stance("default")

    def raised(call, *args):
        """What ``call`` returned, or [-1] where it raised as torch raises a refused compile."""
        try:
            return values(call(*args))
        except RuntimeError:
            return [-1.0]

    @situation
    def _():
        """set_stance('eager_then_compile'), then two calls"""
        with stance("eager_then_compile"):
            return values(C["eager_then_compile"](big), C["eager_then_compile"](big))

    @situation
    def _():
        """set_stance('eager_then_compile') as a context manager, then a call after it"""
        with torch.compiler.set_stance("eager_then_compile"):
            first = C["stance_context"](big)
        return values(first, C["stance_context"](big))

    @situation
    def _():
        """a warm-up call, then set_stance('eager_on_recompile'), then another batch size"""
        first = C["eager_on_recompile"](big)
        with stance("eager_on_recompile"):
            return values(first, C["eager_on_recompile"](big), C["eager_on_recompile"](small))

    @situation
    def _():
        """set_stance('eager_on_recompile') as a decorator, after a warm-up"""
        @torch.compiler.set_stance("eager_on_recompile")
        def infer(batch):
            return C["stance_decorator"](batch)

        first = C["stance_decorator"](big)
        return values(first, infer(small), C["stance_decorator"](small))

    @situation
    def _():
        """recompile_limit = 1, then two batch sizes"""
        with setting(torch._dynamo.config, "recompile_limit", 1):
            return values(C["recompile_limit"](big), C["recompile_limit"](small), C["recompile_limit"](small))

    @situation
    def _():
        """a warm-up call, then the recompile limit lowered to 1, then another batch size"""
        first = C["limit_lowered_after"](big)
        with setting(torch._dynamo.config, "recompile_limit", 1):
            return values(first, C["limit_lowered_after"](small))

    @situation
    def _():
        """set_stance('fail_on_recompile') after a warm-up: the same batch size, then another"""
        first = C["fail_on_recompile"](big)
        with stance("fail_on_recompile"):
            return values(first, C["fail_on_recompile"](big)) + raised(C["fail_on_recompile"], small)

    @situation
    def _():
        """skip_guard_eval_unsafe after a warm-up: the same batch size, then another"""
        first = C["skip_guard_eval"](big)
        with stance("default", skip_guard_eval_unsafe=True):
            return values(first, C["skip_guard_eval"](big)) + raised(C["skip_guard_eval"], small)

    @situation
    def _():
        """set_stance('force_eager'), then back to the default"""
        with stance("force_eager"):
            first = C["force_eager_then_default"](big)
        return values(first, C["force_eager_then_default"](big))

    @situation
    def _():
        """set_stance('default', force_backend='eager'), the RNG seeded"""
        with stance("default", force_backend="eager"):
            torch.manual_seed(0)
            return values(M.compiled_forced(x))

    def reset_then_read(compiled, reset, variable):
        """A first call, ``reset()``, then ``variable`` (which the trace reads) set, and a call again."""
        first = compiled(x)
        reset()
        os.environ[variable] = "3"
        try:
            return values(first, compiled(x))
        finally:
            del os.environ[variable]

    @situation
    def _():
        """a first call, then torch.compiler.reset(), then a variable its trace reads set"""
        return reset_then_read(M.reset_scaled, torch.compiler.reset, "SITUATIONS_RESET_FACTOR")

    @situation
    def _():
        """a first call, then torch._dynamo.reset(), then a variable its trace reads set"""
        return reset_then_read(M.dynamo_reset_scaled, torch._dynamo.reset, "SITUATIONS_DYNAMO_RESET_FACTOR")

    @situation
    def _():
        """a first call, then torch._dynamo.reset_code_caches(), then a variable its trace reads set"""
        return reset_then_read(M.code_caches_scaled, torch._dynamo.reset_code_caches, "SITUATIONS_CODE_CACHES_FACTOR")

    @situation
    def _():
        """a reset between two models, as a test suite's fixture makes one"""
        one = M.make(seed=11)
        first = through(M.predictor(one), one)
        torch.compiler.reset()
        two = M.make(seed=12)
        return first + through(M.predictor(two), two)


def threads():
    """Calls from the threads a server answers on; each function first called there."""
    import concurrent.futures
    import threading

    big, small = M.batch(M.SIZES[0])[0], M.batch(M.SIZES[1])[0]
    C = M.CONTROLLED

    def in_thread(call, *args):
        out = []
        worker = threading.Thread(target=lambda: out.append(call(*args)))
        worker.start()
        worker.join()
        return out[0]

    @situation
    def _():
        """a first call from a worker thread"""
        return values(in_thread(C["first_from_worker"], big), C["first_from_worker"](big))

    @situation
    def _():
        """a thread pool of four calling at once"""
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            return values(*pool.map(C["pooled"], [big, small, big, small]))

    @situation
    def _():
        """a thread that patches Inductor's config"""
        def patched(batch):
            with torch._inductor.config.patch(fallback_random=True):
                return C["patched_in_thread"](batch)

        return values(in_thread(patched, big))


{"right": right, "environment": environment, "after_import": after_import, "hooks": hooks, "optimized": optimized,
 "distributed": distributed, "controls": controls, "threads": threads}[GROUP]()
status = situations_pkg.precompile_status
print(json.dumps({"results": results, "kernels": compiled_kernels, "served": served_compile.served(), "at_import": served_compile.installed_at_import(),
                  "reason": status.reason,
                  "notes": list(status.notes), "entry_reads": max(ENTRY_READS.values(), default=0)}))
