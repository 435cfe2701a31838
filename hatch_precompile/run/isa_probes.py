"""Inductor's ISA probes answered without compiling or loading them again, where that is proven.

Before using a vector ISA, every process compiles a probe library per candidate ISA with the ATen
vector headers (~2 s per ISA here, once per compiler version) and dlopens each in a child Python
(six children, ~1.2 s here), so that an ISA the OS cannot run kills a child, not the program.

- Remembered: a successful probe is kept in the per-user cache, keyed by the probe's bytes,
  torch's and Python's versions, the OS kernel release and the CPU's flags: the same library on
  the same machine is not probed again, not even in the first process after `pip install`, since
  the build's own workload run records its probes too. Failures are never remembered.
- Vouched for: the build records every probe that passed (its flags, and the CPU features they
  enable). Where a loaded set's build passed a probe with the same flags, and this CPU has every
  feature they enable, the set vouches for it: the probe is answered yes without compiling,
  provided this process's compiler accepts the flags (asked with an empty translation unit, ~10
  ms, unless it is the build's own compiler). Torch's library side of the probe (its Sleef
  symbols) is proven by the build, which ran the same torch. Any other probe runs as usual; so
  does every probe when no set was loaded.

Installed by warm_shortcuts.py, through the touchpoints of run/torch_internals/.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from hatch_precompile.protocol import Manifest
from hatch_precompile.run import environment_key, memos, usercache
from hatch_precompile.run.torch_internals import patching, settings

# Probes loaded sets vouch for: flags (as a set of words) -> the build compilers' --version lines.
_vouched: dict[frozenset[str], set[str]] = {}
_probed: dict[str, bool] = {}  # this process's probes: arch flags -> passed


def install() -> None:
    """Hook the probe's compile and load (idempotent, as patching.wrap is)."""
    patching.wrap("check-build", instead=_vouched_probe, after=_note_probe)
    patching.wrap("probe-load", instead=_remembered_probe, after=_remember_probe)


def vouch_for(manifest: Manifest, cpu: frozenset[str]) -> None:
    """Take the probes ``manifest``'s build passed as proven here, where this CPU has every
    feature they enable."""
    for flags, features in manifest.probes.items():
        if all(f.lower() in cpu for f in features):
            _vouched.setdefault(frozenset(flags.split()), set()).add(str((manifest.compiler or {}).get("version")))


def passed_probes() -> list[str]:
    """The arch flags of every ISA probe that passed in this process (the build records them)."""
    return sorted(flags for flags, passed in _probed.items() if passed)


def vouches(arch_flags: Any) -> bool:
    """Whether a loaded set proves a probe with ``arch_flags`` would pass in this process."""
    words = frozenset(arch_flags.split()) if isinstance(arch_flags, str) else frozenset()
    builders = _vouched.get(words)
    if not words or not builders:
        return False
    compiler = settings.cpp_compiler()
    if environment_key.remembered_compiler_version(compiler) in builders:
        return True  # the build's own compiler compiled these flags
    return _accepts(compiler, tuple(sorted(words)))


def _vouched_probe(arguments: dict[str, Any]) -> Any:
    return True if vouches(arguments["self"].build_arch_flags()) else patching.PASS


def _note_probe(arguments: dict[str, Any], passed: Any) -> None:
    flags = arguments["self"].build_arch_flags()
    if isinstance(flags, str):
        _probed[flags] = passed is True


@functools.lru_cache(maxsize=None)
def _accepts(compiler: str, flags: tuple[str, ...]) -> bool:
    """Whether ``compiler`` takes ``flags`` (an unknown -m option is an error for gcc and clang)."""
    try:
        proc = subprocess.run([*shlex.split(compiler), *flags, "-fsyntax-only", "-x", "c++", "-"], input="",
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _probe_library(arguments: dict[str, Any]) -> Any:
    return arguments.get("output_path", next((v for k, v in arguments.items() if k != "self"), None))


def _remembered_probe(arguments: dict[str, Any]) -> Any:
    library = _probe_library(arguments)
    key = _probe_key(library) if isinstance(library, str) else None
    passed = key is not None and memos.get(memos.ISA_PROBES, key, lambda value: value == memos.PASSED)
    return True if passed else patching.PASS


def _remember_probe(arguments: dict[str, Any], ok: Any) -> None:
    library = _probe_library(arguments)
    key = _probe_key(library) if ok is True and isinstance(library, str) else None
    if key is not None:
        memos.put(memos.ISA_PROBES, key, memos.PASSED)


def _probe_key(library: str) -> str | None:
    """What a successful probe of ``library`` on this machine is remembered under; None: do not."""
    try:
        flags = next(
            (line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")),
            None,
        )
        blob = Path(library).read_bytes()
    except OSError:
        return None
    if usercache.base_dir() is None or flags is None:
        return None
    torch = sys.modules.get("torch")
    hasher = hashlib.sha256(blob)
    # Not the install path: a build env's result holds for the same torch installed elsewhere.
    for part in (getattr(torch, "__version__", ""), sys.version_info[:2], platform.release(), flags):
        hasher.update(b"\0" + str(part).encode())
    return hasher.hexdigest()
