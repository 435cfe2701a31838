"""The one place that wraps torch's internals: lazily, once, and failing safe at call time.

A patch runs right after its module is first imported (so ``import pkg`` does not pay for
importing Inductor); a patch that raises is simply not applied. ``codecache.write`` is wrapped
once, whoever asks: the wrapper takes any signature and passes it through unchanged, and what
listens to it runs after the original, can neither change its result nor raise into torch.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import sys
from types import ModuleType
from typing import Any, Callable

CODECACHE = "torch._inductor.codecache"
_MARK = "_hatch_precompile_patched"

Listener = Callable[[dict[str, Any], Any], None]
_write_listeners: list[Listener] = []


def after_import(name: str, patch: Callable[[ModuleType], None]) -> None:
    """Run ``patch(module)`` once ``name`` is imported (now, if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        _guarded(patch)(module)
    elif not any(isinstance(f, _AfterImport) and f.name == name and f.patch is patch for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, patch))


def on_codecache_write(listener: Listener) -> None:
    """Call ``listener(arguments, result)`` after every ``codecache.write``.

    ``arguments`` are the call's arguments by parameter name, defaults filled in (empty when the
    signature cannot be read); ``result`` is what ``write`` returned.
    """
    if listener not in _write_listeners:
        _write_listeners.append(listener)
    after_import(CODECACHE, _wrap_write)


def _wrap_write(codecache: ModuleType) -> None:
    original = getattr(codecache, "write", None)
    if not callable(original) or getattr(original, _MARK, False):
        return
    try:
        signature: inspect.Signature | None = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    def write(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        arguments = _bind(signature, args, kwargs)
        for listener in list(_write_listeners):
            try:
                listener(arguments, result)
            except Exception:  # an observer or a shortcut must never break a compile
                pass
        return result

    setattr(write, _MARK, True)
    codecache.write = write


def _bind(signature: inspect.Signature | None, args: tuple, kwargs: dict) -> dict[str, Any]:
    if signature is None:
        return {}
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return {}
    bound.apply_defaults()
    return dict(bound.arguments)


def _guarded(patch: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    def run(module: ModuleType) -> None:
        try:
            patch(module)
        except Exception:  # torch's internals are not what we expect: leave them as they are
            pass

    return run


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after ``name`` is first imported."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.patch = patch

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec
        patch = _guarded(self.patch)
        others = [f for f in sys.meta_path if isinstance(f, _AfterImport) and f.name == fullname]
        for other in others:  # several patches of one module: all run after its one import
            sys.meta_path.remove(other)

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            patch(module)
            for other in others:
                _guarded(other.patch)(module)

        loader.exec_module = exec_then_patch
        return spec
