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

Both are patched lazily through patching.py, when the Inductor module is first imported, so
that `import package` does not pay for importing Inductor; if torch's internals are not what we
expect, nothing is patched and torch behaves as usual (only slower).
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from hatch_precompile.run import patching, usercache

VEC_ISA = "torch._inductor.cpu_vec_isa"
_MARK = "_hatch_precompile_patched"
_pending = threading.local()


def apply() -> None:
    """Install both shortcuts (idempotent)."""
    patching.on_codecache_write(_note_built_kernel)
    patching.after_import(patching.CODECACHE, _patch_codecache)
    patching.after_import(VEC_ISA, _patch_vec_isa)


def _note_built_kernel(arguments: dict[str, Any], result: Any) -> None:
    # load_async writes `<key>.main.cpp`, then asks for the header, then builds `<key>.main.so`.
    if arguments.get("extension") == "main.cpp":
        path = result[1]
        _pending.binary_exists = isinstance(path, str) and os.path.exists(path[: -len("cpp")] + "so")


def _patch_codecache(codecache: ModuleType) -> None:
    precompile_header = getattr(codecache, "_precompile_header", None)
    if not callable(precompile_header) or getattr(precompile_header, _MARK, False):
        return

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

    setattr(precompile_header_unless_built, _MARK, True)
    codecache._precompile_header = precompile_header_unless_built


def _patch_vec_isa(cpu_vec_isa: ModuleType) -> None:
    vec_isa = getattr(cpu_vec_isa, "VecISA", None)
    probe = getattr(vec_isa, "_probe_load", None)
    if not callable(probe) or getattr(probe, _MARK, False):
        return

    def probe_once(self: Any, *args: Any, **kwargs: Any) -> Any:
        library = args[0] if args else kwargs.get("output_path")
        try:
            marker = _probe_marker(library) if isinstance(library, str) else None
        except Exception:  # never let the shortcut fail the probe it shortcuts
            marker = None
        if marker is not None and marker.is_file():
            return True
        ok = probe(self, *args, **kwargs)
        if ok is True and marker is not None:
            try:
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
            except OSError:
                pass
        return ok

    setattr(probe_once, _MARK, True)
    vec_isa._probe_load = probe_once


def _probe_marker(library: str) -> Path | None:
    """Where a successful probe of ``library`` on this machine is remembered; None: do not."""
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
