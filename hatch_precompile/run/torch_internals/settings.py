"""Torch's settings and loggers: a config setting set (at its module's import, or now), a logger
filtered while a block runs, and what Inductor resolved (its C++ compiler, its cache dir)."""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import logging
from collections.abc import Iterator
from types import ModuleType
from typing import Any, Callable

from hatch_precompile.run.torch_internals.import_hook import after_import
from hatch_precompile.run.torch_internals.patching import resolve
from hatch_precompile.run.torch_internals.registry import lookup

log = logging.getLogger("hatch_precompile.touchpoints")


def set_config(name: str, setting: str, value: Any, module: str | None = None) -> None:
    """Through the touchpoint ``name``, set ``setting`` (``"cpp.dynamic_threads"``) of its config module
    (or of ``module``) once that is imported, if it has it: for the whole process, every thread.

    A setting, not a patch: it applies under the switch too, or the shipped graphs would miss."""
    point = lookup(name, "setting")
    after_import(module or point.module, lambda loaded: _set(loaded, setting, value), name)


def set_config_now(name: str, module: str, setting: str, value: Any) -> None:
    """Set ``setting`` of the config ``module`` now (verify's ``--setting``); raises where torch has
    no such setting, naming it."""
    lookup(name, "setting")
    owner, _ = resolve(importlib.import_module(module), setting)  # AttributeError: no such setting
    setattr(owner, setting.rsplit(".", 1)[-1], value)


@contextlib.contextmanager
def quiet_logger(name: str, keep: Callable[[logging.LogRecord], bool]) -> Iterator[None]:
    """While the block runs, the touchpoint ``name``'s logger passes only the records ``keep`` keeps."""
    point = lookup(name, "logging")

    class Keep(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return keep(record)

    logger, quiet = logging.getLogger(point.module), Keep()
    try:
        logger.addFilter(quiet)
    except Exception:  # the logger is not what we expect: its records pass, as without us
        log.debug("touchpoint %s: not filtered", name, exc_info=True)
    try:
        yield
    finally:
        try:
            logger.removeFilter(quiet)
        except Exception:
            log.debug("touchpoint %s: filter not removed", name, exc_info=True)


def _set(module: ModuleType, name: str, value: Any) -> None:
    owner, _ = resolve(module, name)  # AttributeError (a torch without it): left alone
    setattr(owner, name.rsplit(".", 1)[-1], value)
    entry = _per_thread(module, name)
    if entry is not None:
        # torch 2.13+: a setting set holds in this thread's context only, and every other thread (a
        # thread pool's workers) reads the default; set as the process's default too, it holds in
        # every thread but one that sets its own (a config.patch there).
        entry.env_value_default = value


def _per_thread(module: ModuleType, name: str) -> Any:
    """The config entry of ``name`` where torch keeps what is set per thread context (a ContextVar,
    torch 2.13+) beside a process default every thread reads; else None."""
    entries = getattr(module, "_config", None)
    entry = entries.get(name) if isinstance(entries, dict) else None
    if isinstance(getattr(entry, "user_override", None), contextvars.ContextVar) and hasattr(entry, "env_value_default"):
        return entry
    return None


def cpp_compiler() -> Any:
    """The compiler command Inductor resolved (``cpp.cxx``: ``CXX`` or ``g++``); raises where none works."""
    lookup("cpp-compiler", "call")
    from torch._inductor.cpp_builder import get_cpp_compiler

    return get_cpp_compiler()


def inductor_cache_dir() -> str:
    """The cache dir Inductor uses now."""
    lookup("cache-dir", "call")
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


def cache_entry_dirs() -> tuple[str, str]:
    """(AOTAutograd's, the FX graph cache's) directories of entries, as torch lays them out now."""
    lookup("cache-entries", "call")
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
    from torch._inductor.codecache import FxGraphCache

    dirs = AOTAutogradCache._get_tmp_dir(), FxGraphCache._get_tmp_dir()
    if not all(isinstance(d, str) for d in dirs):
        raise TypeError(f"torch's cache directories are not paths as strings: {dirs!r}")
    return dirs
