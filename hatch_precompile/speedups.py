"""Warm-path shortcuts, applied only after load() installed a package's kernels.

Inductor precompiles its C++ prefix header before it looks at whether a kernel is already
built: every process runs the preprocessor (`g++ -E` plus a sha512 of the output, ~0.3 s), and
the first process of each environment builds the header (~6 s, into a machine-global dir keyed
by the torch install path, outside TORCHINDUCTOR_CACHE_DIR). For a kernel whose binary is on
disk the header is never used: the build step is skipped when the binary exists. So we skip
the header work for exactly those kernels. Patched lazily, when Inductor's codecache is first
imported, so that `import package` does not pay for importing Inductor; if torch's internals
are not what we expect, nothing is patched and torch behaves as usual (only slower).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import threading
from types import ModuleType
from typing import Any, Callable

CODECACHE = "torch._inductor.codecache"
_MARK = "_hatch_precompile_patched"
_pending = threading.local()


def skip_header_for_built_kernels() -> None:
    module = sys.modules.get(CODECACHE)
    if module is not None:
        _patch(module)
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(CODECACHE, _patch))


def _patch(codecache: ModuleType) -> None:
    write = getattr(codecache, "write", None)
    precompile_header = getattr(codecache, "_precompile_header", None)
    if not callable(write) or not callable(precompile_header) or getattr(write, _MARK, False):
        return

    def write_noting_built_kernels(content: Any, extension: str, *args: Any, **kwargs: Any) -> Any:
        basename, path = write(content, extension, *args, **kwargs)
        if extension == "main.cpp":
            # load_async writes the source, then asks for the header, then builds `<key>.main.so`.
            _pending.binary_exists = os.path.exists(path[: -len("cpp")] + "so")
        return basename, path

    def precompile_header_unless_built(*args: Any, **kwargs: Any) -> Any:
        if getattr(_pending, "binary_exists", False):
            _pending.binary_exists = False
            return None  # no `-include <pch>`: nothing will be compiled with it
        return precompile_header(*args, **kwargs)

    # Inductor hashes torch's whole source tree (torch_key, 0.3-0.7 s here) before the first
    # cache lookup; torch offers to start that in a background thread (hashlib drops the GIL).
    prefetch = getattr(getattr(codecache, "torch_key", None), "prefetch", None)
    if callable(prefetch):
        prefetch()

    setattr(write_noting_built_kernels, _MARK, True)
    codecache.write = write_noting_built_kernels
    codecache._precompile_header = precompile_header_unless_built


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``callback(module)`` right after ``name`` is first imported."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec
        callback = self.callback

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            try:
                callback(module)
            except Exception:  # a speedup must never break torch
                pass

        loader.exec_module = exec_then_patch
        return spec
