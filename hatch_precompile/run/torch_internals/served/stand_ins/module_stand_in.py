"""A torch module not imported yet, stood in for while a served call needs only a little of it
(graph_stand_in, debug_wrapper, extension_paths): a subclass answers that little; anything else
asked of the stand-in, and anything set on it, goes to the real module, imported then."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Callable


class Unimported(types.ModuleType):
    """The module ``name``, not imported: a subclass defines what it answers itself (attributes
    of its own, or ``__getattr__`` calling ``real()`` for the rest)."""

    def __init__(self, name: str, **own: Any) -> None:
        super().__init__(name)
        self.__dict__.update(own)

    def real(self) -> types.ModuleType:
        """The real module, imported now where it is not (the stand-in first gives up its place)."""
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return importlib.import_module(self.__name__)

    def __getattr__(self, name: str) -> Any:
        if name == "__path__":  # asked by every `from ... import`: a module, not a package
            raise AttributeError(name)
        return getattr(self.real(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("__") and name.endswith("__"):  # set by ModuleType's constructor
            super().__setattr__(name, value)
            return
        setattr(self.real(), name, value)  # torch 2.14 sets cpp_extension.CUDA_HOME on what it imported


def placed(stand_in: Unimported) -> Callable[[], None]:
    """``stand_in`` in ``sys.modules`` now; what takes it out again (unless the real module took its place)."""
    sys.modules[stand_in.__name__] = stand_in

    def end() -> None:
        if sys.modules.get(stand_in.__name__) is stand_in:
            del sys.modules[stand_in.__name__]

    return end
