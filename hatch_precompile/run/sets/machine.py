"""What this machine offers shipped native code: its CPU's features, its libraries' symbol versions.

A set records the CPU features its kernels may execute (as Linux's ``/proc/cpuinfo`` names them)
and, for each system library they link against, one symbol per symbol version they need. Before a
file is installed, load() asks here whether this machine has all of them: a kernel that uses an
instruction this CPU lacks dies of SIGILL in the user's process, and one whose library or
symbol version is missing fails to load in the middle of a compile. Standard library only.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# The lines of /proc/cpuinfo that list features: x86 ("flags"), arm64 ("Features").
_FEATURE_LINES = ("flags", "features")


@functools.lru_cache(maxsize=None)
def cpu_features(cpuinfo: Path | None = None) -> frozenset[str] | None:
    """The features every CPU of this machine has (lower case), or None where none can be read."""
    try:
        text = (cpuinfo or CPUINFO).read_text(errors="replace")
    except OSError:
        return None
    per_cpu = []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in _FEATURE_LINES:
            per_cpu.append(frozenset(value.lower().split()))
    # A process may be moved to any CPU: what all of them have is what kernels may use.
    return frozenset.intersection(*per_cpu) if per_cpu else None


def missing_features(required: list[str], have: frozenset[str] | None) -> list[str] | None:
    """The features of ``required`` this CPU lacks; None when this CPU's features are unknown."""
    if not required:
        return []
    if have is None:
        return None
    return [f for f in required if f.lower() not in have]


def missing_libraries(needed: dict[str, dict[str, str]]) -> list[str]:
    """``library version`` for each library or symbol version of ``needed`` this process cannot
    resolve, asked of the dynamic linker itself (dlopen, then dlvsym per version)."""
    if not needed or not sys.platform.startswith("linux"):
        return []  # ELF symbol versioning: what the build recorded is Linux's
    dlvsym = _dlvsym()
    missing = []
    for library, versions in sorted(needed.items()):
        try:
            # By name, as the kernel's own DT_NEEDED is resolved: a library torch already loaded
            # (libtorch_cpu.so, its bundled libgomp.so.1) is the one found, without loading again.
            handle = ctypes.CDLL(library)._handle
        except OSError:
            missing.append(f"{library} (not found)")
            continue
        if dlvsym is None:
            continue  # no dlvsym (a non-glibc libc): the library's presence is all we can check
        for version, symbol in sorted(versions.items()):
            # In the library's own scope, or the process's (the dynamic linker's own symbols,
            # such as __tls_get_addr, resolve only there): where the kernel's lookup finds them.
            if symbol and not (dlvsym(handle, symbol.encode(), version.encode())
                               or dlvsym(None, symbol.encode(), version.encode())):
                missing.append(f"{library} {version}")
    return missing


@functools.lru_cache(maxsize=None)
def _dlvsym():
    try:
        function = ctypes.CDLL(None).dlvsym
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_void_p
    function.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
    return function
