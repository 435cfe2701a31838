"""Run a patch right after a module is first imported (a ``MetaPathFinder``), or now where it already
is; a patch that raises is not applied, and is logged."""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
from types import ModuleType
from typing import Any, Callable

log = logging.getLogger("hatch_precompile.touchpoints")


def after_import(name: str, patch: Callable[[ModuleType], None], touchpoint: str | None = None) -> None:
    """Run ``patch(module)`` once the module ``name`` is imported (now, if it already is); a patch
    that raises is not applied, and is logged under ``touchpoint``."""
    module = sys.modules.get(name)
    if module is not None:
        _guarded(patch, touchpoint)(module)
    elif not any(isinstance(f, _AfterImport) and f.name == name and f.patch is patch for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, patch, touchpoint))


def _guarded(patch: Callable[[ModuleType], None], touchpoint: str | None = None) -> Callable[[ModuleType], None]:
    def run(module: ModuleType) -> None:
        try:
            patch(module)
        except Exception:  # torch's internals are not what we expect: leave them as they are
            log.debug("touchpoint %s: not applied to %s", touchpoint or "-", module.__name__, exc_info=True)

    return run


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after ``name`` is first imported."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None], touchpoint: str | None = None) -> None:
        self.name = name
        self.patch = patch
        self.touchpoint = touchpoint

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if loader is None or exec_module is None:
            return spec
        patch = _guarded(self.patch, self.touchpoint)
        others = [f for f in sys.meta_path if isinstance(f, _AfterImport) and f.name == fullname]
        for other in others:  # several patches of one module: all run after its one import
            sys.meta_path.remove(other)

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            patch(module)
            for other in others:
                _guarded(other.patch, other.touchpoint)(module)

        loader.exec_module = exec_then_patch
        return spec
