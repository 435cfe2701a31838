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

- Shipped: a build ships the probe libraries in its cache dir, so that a process whose
  shortcuts are off, or whose torch moved what `check-build` wraps, finds them built. A build that
  answered its probes from the memo compiled none, so the build's child keeps the libraries of
  the probes it ran in the user cache (`keep_libraries`, per torch, compiler and machine: ~30 KB
  each) and puts them into the next build's fresh cache dir first (`seed_libraries`), where torch
  finds them by its own key.

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
from hatch_precompile.run.caches import relocate
from hatch_precompile.run.sets import environment_key, memos, usercache
from hatch_precompile.run.torch_internals import patching, settings

# Probes loaded sets vouch for: flags (as a set of words) -> the build compilers' --version lines.
_vouched: dict[frozenset[str], set[str]] = {}
_probed: dict[str, bool] = {}  # this process's probes: arch flags -> passed
_sources: set[str] = set()  # the probes' sources torch checked in this process
LIBRARIES = ".isa-probe-libraries"
_LIBRARY_LIMIT = 1 << 20


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
    if isinstance(arguments.get("code"), str):
        _sources.add(arguments["code"])
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
    if not isinstance(code, str) or not isinstance(flags, str):
        return None
    return _fingerprint(code, flags)


def _fingerprint(*parts: Any) -> str | None:
    """A digest of ``parts`` with what decides whether a probe library builds and loads here: the
    compiler (its version and file), torch's and Python's versions, the OS kernel release and the
    CPU's flags; None where one of them cannot be read, or there is no user cache."""
    if usercache.base_dir() is None:
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
    hasher = hashlib.sha256()
    for part in (*parts, environment_key.remembered_compiler_version(compiler), found, st.st_ino, st.st_size,
                 st.st_mtime_ns, getattr(torch, "__version__", ""), sys.version_info[:2], platform.release(), cpu):
        hasher.update(str(part).encode() + b"\0")
    return hasher.hexdigest()


def keep_libraries(cache_dir: str | Path) -> None:
    """Keep the files of the probes torch built in ``cache_dir`` (its source and library, by torch's
    key) in the user cache, for ``seed_libraries``; never raises."""
    store = _fingerprint("libraries")
    if store is None or not _sources:
        return
    try:
        with usercache.store_dir(LIBRARIES, store, create=True) as directory:
            for source in Path(cache_dir).glob("*/c*.cpp"):
                library = source.with_suffix(".so")
                if library.is_file() and source.read_text(errors="replace") in _sources:
                    for path, mode in ((source, 0o600), (library, 0o700)):
                        blob = path.read_bytes()
                        if len(blob) <= _LIBRARY_LIMIT:
                            directory.replace(path.name, blob, mode)
    except (OSError, ValueError):  # a read-only home, another account's store: the next build compiles them
        return


def seed_libraries(cache_dir: str | Path) -> None:
    """Put the probe files kept for this torch, compiler and machine into ``cache_dir``, where torch
    looks for them by its own key before it compiles a probe; never raises."""
    store = _fingerprint("libraries")
    if store is None:
        return
    try:
        with usercache.store_dir(LIBRARIES, store) as directory:
            for name in directory.names():
                stem, suffix = os.path.splitext(name)
                if suffix not in (".cpp", ".so") or not stem.startswith("c"):
                    continue
                target = Path(cache_dir) / relocate.cache_relpath(stem, suffix)
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(directory.read(name, _LIBRARY_LIMIT))
                    target.chmod(0o755 if suffix == ".so" else 0o644)
    except (OSError, ValueError):  # none kept yet, or not this user's: torch compiles them
        return
