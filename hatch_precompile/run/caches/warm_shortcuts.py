"""Warm-path shortcuts, applied only after load() installed a package's kernels.

1. Inductor precompiles its C++ prefix header before it looks at whether a kernel is already
built: every process runs the preprocessor (`g++ -E` plus a sha512 of the output, ~0.3 s), and
the first process of each environment builds the header (~6 s, into a machine-global dir keyed
by the torch install path, outside TORCHINDUCTOR_CACHE_DIR). For a kernel whose binary is on
disk the header is never used: the build step is skipped when the binary exists. So we skip
the header work for exactly those kernels.

2. Inductor's ISA probes, compiled and loaded by every process: answered from what this user's
earlier processes or the loaded set's build proved (isa_probes.py).

3. Before its first cache lookup, Inductor hashes torch's sources (``torch_key``) and, on a CUDA
build, Triton's (``triton_key``: 0.4 s, mostly the 400 MB libtriton.so). Both start in the
background when Dynamo starts its first compile, computed by torch as always (torch's key is never
stored): not when Inductor is imported, since a package that calls ``torch.compile`` at import
imports it in processes that never compile (a CLI's ``--help``), which then paid for the hash,
some 0.2 s of CPU, and waited at exit for torch's prefetch thread.
Where CUDA shows no GPU, torch before 2.15 leaves Triton's key out of the graphs' keys: its own
``CacheBase.get_system`` is run with two stand-ins for it, and when both answers are equal that
answer is used and Triton is never hashed (prefetch.answer_without). Where the key is used
(torch 2.15, or a GPU), the value torch computed is remembered in the per-user cache under a
fingerprint of every file in Triton's dir (``TritonKeyMemo``), and later processes set it into
torch's cache (2.13+) instead of hashing 400 MB again.

Each hooks into a touchpoint of run/torch_internals/, when the Inductor module is first imported,
so that `import package` does not pay for importing Inductor; if torch's internals are not what
we expect, nothing is hooked and torch behaves as usual (only slower).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import threading
from typing import Any

from hatch_precompile.protocol import Manifest
from hatch_precompile.run.caches import isa_probes
from hatch_precompile.run.sets import environment_key, memos, usercache
from hatch_precompile.run.torch_internals import patching
from hatch_precompile.run.torch_internals.caches import prefetch

_pending = threading.local()


def install_shortcuts(manifest: Manifest | None = None, cpu: frozenset[str] | None = None) -> None:
    """Install the shortcuts (idempotent). ``manifest``: a set load() installed; ``cpu``: this
    CPU's features, to tell which of the set's probes it may vouch for."""
    if manifest is not None and cpu is not None:
        isa_probes.vouch_for(manifest, cpu)
    patching.wrap("write", after=_note_built_kernel)
    # Inductor asks the compiler's --version to find it and to tell Intel's apart, in every process:
    # answered from the version line remembered for that compiler file, as load()'s own check is.
    patching.wrap("compiler-search", instead=_remembered_search)
    patching.wrap("intel-compiler", instead=_not_intel_by_remembered_version)
    patching.wrap("precompile-header", instead=_skip_header_when_built)
    # Inductor hashes torch's whole source tree (torch_key, 0.3-0.7 s here), and where Triton is
    # installed (a CUDA build, on a GPU or not) Triton's too, before the first cache lookup: both
    # start in the background (hashlib drops the GIL) at the first compile, computed by torch as
    # always (item 3).
    prefetch.at_first_compile(functools.partial(prefetch.prefetch, "torch-key"))
    # Remembered only where a set was loaded: not for each build env's short-lived Triton.
    triton = functools.partial(prefetch.at_first_compile, functools.partial(
        prefetch.prefetch, "triton-key", memo=TritonKeyMemo() if manifest is not None else None))
    if manifest is not None and _shows_no_gpu(manifest):
        # Then torch before 2.15 leaves Triton's key out of every graph's key (its C++ kernels
        # do not use Triton), yet computes it first (0.4 s of hashing a CUDA build's libtriton).
        prefetch.answer_without("system", "triton_key", otherwise=triton)
    else:
        triton()
    isa_probes.install()


class TritonKeyMemo:
    """Triton's key as torch computed it on this machine, kept under a fingerprint of every file
    in Triton's package dir, which holds all that the key hashes: path, size, mtime, ctime, inode.
    A changed Triton changes it, even a file rewritten with its old mtime (the ctime moves)."""

    def __init__(self) -> None:
        self._read_under: str | None = None

    def get(self) -> str | None:
        self._read_under = self._fingerprint()
        if self._read_under is None:
            return None
        return memos.get(memos.TRITON_KEYS, self._read_under, memos.printable_line)

    def put(self, value: object) -> None:
        fingerprint = self._fingerprint()
        if not isinstance(value, str) or fingerprint is None or fingerprint != self._read_under:
            return  # no Triton, or it changed while torch hashed it
        if memos.printable_line(value):  # an empty or garbled key is never pinned
            memos.put(memos.TRITON_KEYS, fingerprint, value)

    @staticmethod
    def _fingerprint() -> str | None:
        spec = importlib.util.find_spec("triton")
        roots = list(spec.submodule_search_locations or []) if spec is not None else []
        if usercache.base_dir() is None or len(roots) != 1:
            return None
        hasher = hashlib.sha256(f"{roots[0]}\0{sys.implementation.cache_tag}".encode())
        for directory, subdirs, files in os.walk(roots[0]):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")  # never hashed; written by imports
            for name in sorted(files):
                stat = os.stat(os.path.join(directory, name), follow_symlinks=False)
                hasher.update(f"\n{os.path.relpath(os.path.join(directory, name), roots[0])}\0{stat.st_size}\0"
                              f"{stat.st_mtime_ns}\0{stat.st_ctime_ns}\0{stat.st_ino}\0{stat.st_dev}".encode())
        return hasher.hexdigest()


def _shows_no_gpu(manifest: Manifest) -> bool:
    """Whether CUDA shows this process no GPU: load() matched a set keyed without one (asked of
    NVML, run/sets/gpu.py), on a CUDA build of torch or one without a GPU backend; not ROCm's."""
    torch = sys.modules.get("torch")
    return manifest.env.get("gpu") is None and getattr(getattr(torch, "version", None), "hip", None) is None


def _note_built_kernel(arguments: dict[str, Any], result: Any) -> None:
    # load_async writes `<key>.main.cpp`, then asks for the header, then builds `<key>.main.so`.
    if arguments.get("extension") == "main.cpp":
        path = result[1]
        _pending.binary_exists = isinstance(path, str) and os.path.exists(path[: -len("cpp")] + "so")


def _skip_header_when_built(arguments: dict[str, Any]) -> Any:
    if getattr(_pending, "binary_exists", False):
        _pending.binary_exists = False
        return None  # no `-include <pch>`: nothing will be compiled with it
    return patching.PASS


def _working(command: Any) -> bool:
    return isinstance(command, str) and not environment_key.remembered_compiler_version(command).startswith("unavailable")


def _remembered_search(arguments: dict[str, Any]) -> Any:
    """``cpp_compiler_search``: its first compiler that answers ``--version``. A None in its list is
    a compiler torch installs only on Linux with TORCH_INDUCTOR_INSTALL_GXX set (then torch's own
    search runs); torch's search also runs where none works, for its error."""
    search = arguments.get("search")
    if not isinstance(search, (tuple, list)):
        return patching.PASS
    installs = sys.platform == "linux" and bool(os.getenv("TORCH_INDUCTOR_INSTALL_GXX"))
    for command in search:
        if command is None and not installs:
            continue
        if not isinstance(command, str):
            return patching.PASS
        if _working(command):
            return command
    return patching.PASS


def _not_intel_by_remembered_version(arguments: dict[str, Any]) -> Any:
    """``_is_intel_compiler``: False for a compiler whose version line is not Intel's; Intel's own
    (with torch's version checks) and one that does not answer go to torch."""
    command = arguments.get("cpp_compiler")
    if not _working(command):
        return patching.PASS
    return patching.PASS if "Intel" in environment_key.remembered_compiler_version(command) else False


