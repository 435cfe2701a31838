"""Inductor's ISA probes answered without compiling or loading them again, where that is proven.

Before using a vector ISA, every process with a fresh cache dir compiles a probe library per
candidate ISA with the ATen vector headers (~2.5 s per ISA here) and dlopens each in a child
Python (~0.4 s each), so that an ISA the OS cannot run kills a child, not the program. Each
build's workload runs with a fresh cache dir, so each build paid ~8 s for them.

- Remembered: a successful probe is kept in the per-user cache, keyed by what torch keys the
  probe's library on in its own cache (the probe's source, the ISA's flags, the compiler's version,
  torch's version), with the compiler file's identity, Python's version, the OS kernel release and
  the CPU's flags, which decide whether the library loads: the same probe on the same machine is
  neither compiled nor loaded again, not even in the first process after `pip install`, since the
  build's own workload run records its probes too. Failures are never remembered.
- Vouched for: the build records every probe that passed (its flags, and the CPU features they
  enable). Where a loaded set's build passed a probe with the same flags, and this CPU has every
  feature they enable, the set vouches for it: the probe is answered yes without compiling,
  provided this process's compiler accepts the flags (asked with an empty translation unit, ~10
  ms, unless it is the build's own compiler). Torch's library side of the probe (its Sleef
  symbols) is proven by the build, which ran the same torch. Any other probe runs as usual; so
  does every probe when no set was loaded.

Installed by warm_shortcuts.py (and by the build's child), through the touchpoint `check-build`
of run/torch_internals/.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shlex
import shutil
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
    """Hook the probe (idempotent, as patching.wrap is)."""
    patching.wrap("check-build", instead=_known_probe, after=_note_probe)


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


def _known_probe(arguments: dict[str, Any]) -> Any:
    """Yes, without compiling or loading, for a probe a loaded set vouches for or this user passed."""
    flags = arguments["self"].build_arch_flags()
    if not vouches(flags):
        key = _probe_key(arguments)
        if key is None or not memos.get(memos.ISA_PROBES, key, lambda value: value == memos.PASSED):
            return patching.PASS
    _probed[flags] = True  # passed here as surely as if run: a build records it for its users
    return True


def _note_probe(arguments: dict[str, Any], passed: Any) -> None:
    flags = arguments["self"].build_arch_flags()
    if isinstance(flags, str):
        _probed[flags] = passed is True
    key = _probe_key(arguments) if passed is True else None
    if key is not None:
        memos.put(memos.ISA_PROBES, key, memos.PASSED)


@functools.lru_cache(maxsize=None)
def _accepts(compiler: str, flags: tuple[str, ...]) -> bool:
    """Whether ``compiler`` takes ``flags`` (an unknown -m option is an error for gcc and clang)."""
    try:
        proc = subprocess.run([*shlex.split(compiler), *flags, "-fsyntax-only", "-x", "c++", "-"], input="",
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _probe_key(arguments: dict[str, Any]) -> str | None:
    """What a passed probe is remembered under (the module's docstring); None: do not remember it."""
    code, flags = arguments.get("code"), arguments["self"].build_arch_flags()
    if not isinstance(code, str) or not isinstance(flags, str) or usercache.base_dir() is None:
        return None
    try:
        cpu = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), None)
        compiler = settings.cpp_compiler()
        found = shutil.which(shlex.split(compiler)[0]) if isinstance(compiler, str) else None
        st = os.stat(os.path.realpath(found)) if found else None
    except Exception:  # no /proc, no compiler, or torch's lookup moved: probed as usual, not remembered
        return None
    if cpu is None or st is None:
        return None
    torch = sys.modules.get("torch")
    hasher = hashlib.sha256(code.encode())
    for part in (flags, environment_key.remembered_compiler_version(compiler), found, st.st_ino, st.st_size,
                 st.st_mtime_ns, getattr(torch, "__version__", ""), sys.version_info[:2], platform.release(), cpu):
        hasher.update(b"\0" + str(part).encode())
    return hasher.hexdigest()
