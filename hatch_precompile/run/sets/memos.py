"""Per-user memos: a value one process worked out, kept so that the next skips the work.

Three kinds, each a dir of the per-user store: ``.compilers/`` (a compiler file's ``--version``
line), ``.isa-probes/`` (an ISA probe library that loaded on this machine), ``.triton-keys/``
(Triton's key as torch computed it). A memo is a file named by its key and holding the key, then
the value, each on a line of its own. Reading and writing go through usercache.store_dir, so the
dirs and files are this user's (private_dirs.py), and a memo is written whole under an
unpredictable temp name, then renamed into place.

A memo is used only when its file names its own key and holds a value its kind accepts: one that
is empty, malformed, written for another key or by another account is ignored (the process works
the value out as if there were none), and the next ``put`` replaces it. A memo dir another account
owns is not used at all, and the process says so once. Standard library only.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

from hatch_precompile.errors import PrecompileWarning, Untrusted
from hatch_precompile.run.sets import usercache

COMPILERS = ".compilers"  # dot: never a package name
ISA_PROBES = ".isa-probes"
TRITON_KEYS = ".triton-keys"
PASSED = "passed"  # the value of an ISA probe that loaded
_LIMIT = 64 * 1024

_said: set[str] = set()
_lock = threading.Lock()


def get(kind: str, key: str, valid: Callable[[str], bool]) -> str | None:
    """The value remembered under ``key``, or None (none, or none this process may use)."""
    try:
        directory = usercache.store_dir(kind)
    except Untrusted as exc:
        _distrust(exc)
        return None
    except (OSError, ValueError):  # none yet, no home
        return None
    with directory:
        try:
            raw = directory.read(key, _LIMIT)
        except (OSError, ValueError):  # none yet; one another account put here: replaced by the next put
            return None
    lines = raw.decode("utf-8", "replace").split("\n")
    if len(lines) != 3 or lines[0] != key or lines[2] or not lines[1] or not valid(lines[1]):
        return None
    return lines[1]


def put(kind: str, key: str, value: str) -> None:
    """Remember ``value`` under ``key``; never raises (a read-only home: worked out next time)."""
    if "\n" in value or "\n" in key or "/" in key or not value:
        return
    try:
        with usercache.store_dir(kind, create=True) as directory:
            directory.replace(key, f"{key}\n{value}\n".encode(), 0o600)
    except Untrusted as exc:
        _distrust(exc)
    except (OSError, ValueError):
        pass


def printable_line(value: str) -> bool:
    """One printable line, as long as any value kept here (a CUDA build's Triton key is ~2 kB)."""
    return value.isprintable() and len(value) < 16 * 1024


def _distrust(problem: Exception) -> None:
    """Say once per process and problem that memos another account could write are not used (the
    three kinds share their parent dir: one line where it is the one at fault)."""
    with _lock:
        if str(problem) in _said:
            return
        _said.add(str(problem))
    warnings.warn(f"hatch-precompile: not using the per-user memos: {problem}; the checks they would skip run "
                  "as usual", PrecompileWarning, stacklevel=4)
