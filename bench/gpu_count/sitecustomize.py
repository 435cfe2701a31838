"""Counts and times what a GPU process's first step spends, in every process of a program.

On ``PYTHONPATH`` with ``GPU_COUNT_FILE`` set, each Python process (Inductor's compile workers
too) appends lines to that file:

- ``triton_compile PID`` when Triton runs its ptxas stage (a Triton cache hit never does),
  ``autotune_benchmark PID`` when Inductor benchmarks a kernel's configs at run time;
- ``time LABEL PID SECONDS CALLS`` at exit, for each phase below that ran: the wall time spent
  inside it (outermost calls only), so a first step can be broken down by phase. The phases
  nest (Dynamo's compile holds the cache loads); bench/gpu.py prints them side by side.

Compiler processes are counted by their exec, not here: bench/gpu.py puts shims on ``PATH``.
Nothing is imported until the program imports those modules itself; a name a torch or Triton
release lacks is skipped (its phase shows no time).
"""

import atexit
import functools
import importlib.abc
import os
import sys
import threading
import time

_FILE = os.environ.get("GPU_COUNT_FILE")
_COUNTED = {
    "triton.backends.nvidia.compiler": [("CUDABackend.make_cubin", "triton_compile")],
    "torch._inductor.runtime.triton_heuristics": [("CachingAutotuner.benchmark_all_configs", "autotune_benchmark")],
}
# phase -> where torch or Triton does it (module, qualname); several releases' names each.
_TIMED = {
    "cuda_init": [("torch.cuda", "_lazy_init")],
    "dynamo": [("torch._dynamo.convert_frame", "_compile")],
    "aot_cache_load": [("torch._functorch._aot_autograd.autograd_cache", "AOTAutogradCache.try_load"),
                       ("torch._functorch._aot_autograd.autograd_cache", "AOTAutogradCache.load")],
    "fx_cache_load": [("torch._inductor.codecache", "FxGraphCache.load_with_key")],
    "bundle_emit": [("torch._inductor.triton_bundler", "TritonBundler.read_and_emit")],
    "module_load": [("torch._inductor.codecache", "PyCodeCache.load_by_key_path")],
    "kernel_load": [("torch._inductor.runtime.static_cuda_launcher", "StaticallyLaunchedCudaKernel.load_kernel"),
                    ("torch._inductor.runtime.static_triton_launcher", "StaticallyLaunchedTritonKernel.load_kernel"),
                    ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner._make_launchers")],
    "triton_c_module": [("triton.runtime.build", "compile_module_from_src"),
                        ("triton.backends.nvidia.driver", "compile_module_from_src")],
    "triton_c_build": [("triton.runtime.build", "_build")],
    "compile_pool": [("torch._inductor.async_compile", "AsyncCompile.warm_pool"),
                     ("torch._inductor.async_compile", "AsyncCompile.wakeup")],
    "triton_key": [("torch._inductor.codecache", "triton_key"), ("torch.utils._triton", "triton_key")],
}
_TARGETS: dict = {}
for _label, _places in _TIMED.items():
    for _module, _qualname in _places:
        _TARGETS.setdefault(_module, []).append((_qualname, _label, "time"))
for _module, _entries in _COUNTED.items():
    for _qualname, _event in _entries:
        _TARGETS.setdefault(_module, []).append((_qualname, _event, "count"))

_spent: dict = {}  # label -> [seconds, calls]
_depth = threading.local()


def _record(line):
    with open(_FILE, "a") as f:
        f.write(line + "\n")


def _timed(function, label):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        depth = getattr(_depth, label, 0)
        setattr(_depth, label, depth + 1)
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            setattr(_depth, label, depth)
            if depth == 0:  # outermost only: a recursive or nested call is inside this time
                entry = _spent.setdefault(label, [0.0, 0])
                entry[0] += time.perf_counter() - started
                entry[1] += 1

    return wrapper


def _counting(function, event):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        _record(f"{event} {os.getpid()}")
        return function(*args, **kwargs)

    return wrapper


def _patch(module, qualname, label, how):
    owner_name, _, name = qualname.rpartition(".")
    owner = getattr(module, owner_name, None) if owner_name else module
    if owner is None or name not in vars(owner):
        return
    raw = vars(owner)[name]
    wrap = _timed if how == "time" else _counting
    if isinstance(raw, classmethod):
        setattr(owner, name, classmethod(wrap(raw.__func__, label)))
    elif isinstance(raw, staticmethod):
        setattr(owner, name, staticmethod(wrap(raw.__func__, label)))
    elif callable(raw):
        setattr(owner, name, wrap(raw, label))


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            for qualname, label, how in _TARGETS[name]:
                try:
                    _patch(module, qualname, label, how)
                except Exception as exc:  # a measuring aid: never the program's failure
                    _record(f"unpatched {os.getpid()} {name}.{qualname} {exc!r}")

        spec.loader.exec_module = exec_and_patch
        return spec


def _write_times():
    for label, (seconds, calls) in sorted(_spent.items()):
        _record(f"time {label} {os.getpid()} {seconds:.4f} {calls}")


if _FILE:
    sys.meta_path.insert(0, _Finder())
    atexit.register(_write_times)
