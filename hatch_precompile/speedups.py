"""Warm-path shortcuts, applied only after load() installed a package's kernels.

1. Inductor precompiles its C++ prefix header before it looks at whether a kernel is already
built: every process runs the preprocessor (`g++ -E` plus a sha512 of the output, ~0.3 s), and
the first process of each environment builds the header (~6 s, into a machine-global dir keyed
by the torch install path, outside TORCHINDUCTOR_CACHE_DIR). For a kernel whose binary is on
disk the header is never used: the build step is skipped when the binary exists. So we skip
the header work for exactly those kernels.

2. Before using a vector ISA, every process compiles a probe library per candidate ISA (cached in
the Inductor cache dir) and dlopens each in a child Python (six children, ~1.2 s here), so that
an ISA the OS cannot run kills a child, not the program. We remember a successful probe in the
per-user cache, keyed by the probe's bytes, torch's and Python's versions, the OS kernel release
and the CPU's flags: the same library on the same machine is not probed again — not even in the
first process after `pip install`, since the build's own workload run records its probes too.
Failures are never remembered.

Both are patched lazily, when the Inductor module is first imported, so that `import package`
does not pay for importing Inductor; if torch's internals are not what we expect, nothing is
patched and torch behaves as usual (only slower).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import os
import platform
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

CODECACHE = "torch._inductor.codecache"
VEC_ISA = "torch._inductor.cpu_vec_isa"
_MARK = "_hatch_precompile_patched"
_pending = threading.local()


def apply() -> None:
    """Install both shortcuts (idempotent)."""
    _after_import(CODECACHE, _patch_codecache)
    _after_import(VEC_ISA, _patch_vec_isa)


def _after_import(name: str, patch: Callable[[ModuleType], None]) -> None:
    module = sys.modules.get(name)
    if module is not None:
        _guarded(patch)(module)
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, _guarded(patch)))


def _guarded(patch: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    def run(module: ModuleType) -> None:
        try:
            patch(module)
        except Exception:  # a speedup must never break torch
            pass

    return run


def _patch_codecache(codecache: ModuleType) -> None:
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
            callback(module)

        loader.exec_module = exec_then_patch
        return spec


def _patch_vec_isa(cpu_vec_isa: ModuleType) -> None:
    vec_isa = getattr(cpu_vec_isa, "VecISA", None)
    probe = getattr(vec_isa, "_probe_load", None)
    if not callable(probe) or getattr(probe, _MARK, False):
        return

    def probe_once(self: Any, output_path: str) -> bool:
        marker = _probe_marker(output_path)
        if marker is not None and marker.is_file():
            return True
        ok = probe(self, output_path)
        if ok and marker is not None:
            try:
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
            except OSError:
                pass
        return ok

    setattr(probe_once, _MARK, True)
    vec_isa._probe_load = probe_once


def _probe_marker(library: str) -> Path | None:
    from hatch_precompile import usercache

    base = usercache.base_dir()
    try:
        flags = next(
            (line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")),
            None,
        )
        blob = Path(library).read_bytes()
    except OSError:
        return None
    if base is None or flags is None:
        return None
    torch = sys.modules.get("torch")
    hasher = hashlib.sha256(blob)
    # Not the install path: a build env's result holds for the same torch installed elsewhere.
    for part in (getattr(torch, "__version__", ""), sys.version_info[:2], platform.release(), flags):
        hasher.update(b"\0" + str(part).encode())
    return base / ".isa-probes" / hasher.hexdigest()  # dot: never a package name
