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

3. The ISA probe compile: before it dlopens a probe, each process compiles it with the ATen
vector headers (~2 s per ISA here), once per compiler version. The build records every probe
that passed (its flags, and the CPU features they enable). Where a loaded set's build passed a
probe with the same flags, and this CPU has every feature they enable (/proc/cpuinfo), the set
vouches for it: the probe is answered yes without compiling, provided this process's compiler
accepts the flags (asked with an empty translation unit, ~10 ms, unless it is the build's own
compiler). Torch's library side of the probe (its Sleef symbols) is proven by the build, which
ran the same torch. Any other probe runs as usual; so does every probe when no set was loaded.

All are patched lazily through patching.py, when the Inductor module is first imported, so
that `import package` does not pay for importing Inductor; if torch's internals are not what we
expect, nothing is patched and torch behaves as usual (only slower).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from hatch_precompile.protocol import Manifest
from hatch_precompile.run import envkey, patching, usercache

VEC_ISA = "torch._inductor.cpu_vec_isa"
_MARK = "_hatch_precompile_patched"
_pending = threading.local()
# Probes loaded sets vouch for: flags (as a set of words) -> the build compilers' --version lines.
_vouched: dict[frozenset[str], set[str]] = {}
_probed: dict[str, bool] = {}  # this process's probes: arch flags -> passed


def apply(manifest: Manifest | None = None, cpu: frozenset[str] | None = None) -> None:
    """Install the shortcuts (idempotent). ``manifest``: a set load() installed; ``cpu``: this
    CPU's features, to tell which of the set's probes it may vouch for."""
    if manifest is not None and cpu is not None:
        for flags, features in manifest.probes.items():
            if all(f.lower() in cpu for f in features):
                _vouched.setdefault(frozenset(flags.split()), set()).add(str((manifest.compiler or {}).get("version")))
    patching.on_codecache_write(_note_built_kernel)
    patching.after_import(patching.CODECACHE, _patch_codecache)
    patching.after_import(VEC_ISA, _patch_vec_isa)


def passed_probes() -> list[str]:
    """The arch flags of every ISA probe that passed in this process (the build records them)."""
    return sorted(flags for flags, passed in _probed.items() if passed)


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
    _patch_check_build(cpu_vec_isa)
    _patch_probe_load(cpu_vec_isa)


def _patch_check_build(cpu_vec_isa: ModuleType) -> None:
    vec_isa = cpu_vec_isa.VecISA
    check_build = vec_isa.check_build
    if getattr(check_build, _MARK, False):
        return

    def check_build_unless_vouched(self: Any, *args: Any, **kwargs: Any) -> Any:
        flags = None
        try:
            flags = self.build_arch_flags()
            if vouches(flags):
                return True
        except Exception:  # never let the shortcut fail the probe it shortcuts
            pass
        passed = check_build(self, *args, **kwargs)
        if isinstance(flags, str):
            _probed[flags] = passed is True
        return passed

    setattr(check_build_unless_vouched, _MARK, True)
    vec_isa.check_build = check_build_unless_vouched


def vouches(arch_flags: Any) -> bool:
    """Whether a loaded set proves a probe with ``arch_flags`` would pass in this process."""
    words = frozenset(arch_flags.split()) if isinstance(arch_flags, str) else frozenset()
    builders = _vouched.get(words)
    if not words or not builders:
        return False
    from torch._inductor.cpp_builder import get_cpp_compiler

    compiler = get_cpp_compiler()
    if envkey.compiler_version(compiler) in builders:
        return True  # the build's own compiler compiled these flags
    return _accepts(compiler, tuple(sorted(words)))


@functools.lru_cache(maxsize=None)
def _accepts(compiler: str, flags: tuple[str, ...]) -> bool:
    """Whether ``compiler`` takes ``flags`` (an unknown -m option is an error for gcc and clang)."""
    try:
        proc = subprocess.run([*shlex.split(compiler), *flags, "-fsyntax-only", "-x", "c++", "-"], input="",
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _patch_probe_load(cpu_vec_isa: ModuleType) -> None:
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
