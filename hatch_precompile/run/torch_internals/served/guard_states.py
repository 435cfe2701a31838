"""A shipped entry's guard states unpickled ahead of its install, for a function installed at its
first call (run/torch_internals/served/dynamo_cache.py's ``ahead``): that call then only rebuilds
and checks the guards.

Unpickling a guard state builds many objects (torch's stand-ins of modules and tensors); where it
is done at the first call, it is 10-25 ms of that call, and on torch 2.14.1 (AMD EPYC, 2 cores) the
objects it makes started a full garbage collection there (177 ms). Read ahead, it is done while
the package is imported. It imports nothing: a state that names a module not imported yet is left
to the install, which reads it as before. Reading a state ahead holds what it names by reference
as found at that moment, not at the first call; the guards torch then rebuilds are compared with
the build's all the same (guard_text), so a value that moved in between is traced, never served.
Every read of a guard state, ahead or at the install, takes a parameter's grad torch pickled as
missing as none (``missing_grads_as_none``).

Standard library at import; torch is the caller's.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.abc
import logging
import sys
import threading
from typing import Any, Callable, Iterator

from hatch_precompile.run.torch_internals.registry import lookup

log = logging.getLogger("hatch_precompile")
_read: dict[str, Any] = {}  # by the raw state's digest: the state, for one install
_lock = threading.Lock()


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def read_ahead(raws: Iterator[bytes], load_state: Callable[[bytes], Any]) -> int:
    """Each of ``raws`` unpickled now with ``load_state`` (torch's ``load_guards_state``), importing
    nothing; how many were. A state that cannot be read so is left to the install."""
    done = 0
    refuse = _NoNewImports()
    sys.meta_path.insert(0, refuse)
    try:
        for raw in raws:
            key = digest(raw)
            with _lock:
                if key in _read:
                    continue
            try:
                state = load_state(raw)
            except Exception:  # a module not imported yet, or torch moved: read at the install
                log.debug("hatch-precompile: a guard state not read ahead of its install", exc_info=True)
                continue
            with _lock:
                _read[key] = state
            done += 1
    finally:
        sys.meta_path.remove(refuse)
    return done


def taken(key: str) -> Any:
    """The state read ahead from the raw state of digest ``key``, once (an install tried again reads
    its own), or None."""
    with _lock:
        return _read.pop(key, None)


class _NoNewImports(importlib.abc.MetaPathFinder):
    """Refuses every import not yet done, on the thread reading ahead only (another thread's import,
    at the same moment, is its own)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if threading.get_ident() == self.thread:
            raise ImportError(f"{fullname} is not imported yet: its guard state is read at the install")
        return None


@contextlib.contextmanager
def missing_grads_as_none() -> Iterator[None]:
    """Torch pickles a parameter that had a ``.grad`` when it compiled with that grad as "missing",
    and its own unpickler then raises (torch 2.13, 2.14: a module compiled after a training step);
    the grad is no part of any guard, so it is read back as none while an entry is installed."""
    lookup("guard-state-tensor", "wrap")
    import torch
    from torch._dynamo import guards  # noqa: TID251

    pickler = guards.GuardsStatePickler
    original = pickler.__dict__["_unpickle_tensor"]
    unpickle = original.__func__

    def _unpickle_tensor(cls: Any, meta: Any, device: Any, pytype: Any, keys: Any, grad: Any) -> Any:
        return unpickle(cls, meta, device, pytype, keys, grad if grad is None or isinstance(grad, torch.Tensor) else None)

    pickler._unpickle_tensor = classmethod(_unpickle_tensor)
    try:
        yield
    finally:
        pickler._unpickle_tensor = original
