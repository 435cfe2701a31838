"""Counts real Triton compiles and autotuning benchmarks in every process of a program.

On ``PYTHONPATH`` with ``GPU_COUNT_FILE`` set, each Python process (Inductor's compile workers
too) appends one line per event to that file: ``triton_compile`` when Triton runs its ptxas stage
(a Triton cache hit never does), ``autotune_benchmark`` when Inductor benchmarks a kernel's
configs at run time. Nothing is imported until the program imports those modules itself.
"""

import importlib.abc
import os
import sys

_FILE = os.environ.get("GPU_COUNT_FILE")
_TARGETS = {
    "triton.backends.nvidia.compiler": ("CUDABackend", "make_cubin", "triton_compile"),
    "torch._inductor.runtime.triton_heuristics": ("CachingAutotuner", "benchmark_all_configs", "autotune_benchmark"),
}


def _record(event, detail=""):
    with open(_FILE, "a") as f:
        f.write(f"{event} {os.getpid()} {detail}\n")


def _counting(method, event):
    def wrapper(self, *args, **kwargs):
        _record(event, getattr(self, "filename", "") or "")  # an autotuner's kernel source path
        return method(self, *args, **kwargs)

    return wrapper


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
        cls_name, method, event = _TARGETS[name]

        def exec_and_patch(module):
            exec_module(module)
            cls = getattr(module, cls_name, None)
            if cls is not None and hasattr(cls, method):
                setattr(cls, method, _counting(getattr(cls, method), event))
            else:
                _record(f"unpatched:{name}")

        spec.loader.exec_module = exec_and_patch
        return spec


if _FILE:
    sys.meta_path.insert(0, _Finder())
