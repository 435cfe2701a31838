"""A served graph loaded without Inductor's lowerings. On a cache hit, torch's
``FxGraphCache.cache_hit_post_compile`` imports ``torch._inductor.graph`` only to read a test hook,
``GraphLowering.save_output_code``; that import brings in the lowerings and every kernel template
(about 100 modules: half a second on this project's 2-core test machine). The hook is None in any process that has not
imported the module: no one can have set it. So while a graph loads in such a process, a stand-in
module answers that one read, and anything else asked of it imports the real module and answers
from it. Loaded code reads ``torch._inductor.debug`` as an attribute at each call (the lowerings'
imports bring it in otherwise), so it is imported first."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Callable

from hatch_precompile.run.torch_internals.patching import wrap
from hatch_precompile.run.torch_internals.registry import lookup

GRAPH = "torch._inductor.graph"


def install() -> None:
    """From now on, each graph torch loads from its cache in this process, where the lowerings are
    not imported yet, loads without them."""
    wrap("post-compile-graph", around=_stand_in)


def _stand_in(arguments: dict[str, Any]) -> Callable[[], None] | None:
    if GRAPH in sys.modules:
        return None
    point = lookup("post-compile-graph", "wrap")
    importlib.import_module("torch._inductor.debug")
    reader = sys.modules[point.module].FxGraphCache.cache_hit_post_compile
    code = getattr(getattr(reader, "__wrapped__", None), "__code__", None)
    if code is None:  # not torch's function under this package's wrapper: the real module is imported
        return None
    stand_in = _Unimported(GRAPH, code)
    sys.modules[GRAPH] = stand_in

    def end() -> None:
        if sys.modules.get(GRAPH) is stand_in:
            del sys.modules[GRAPH]

    return end


class _Unimported(types.ModuleType):
    """``torch._inductor.graph`` not imported: to torch's cache-hit function, a ``GraphLowering``
    whose test hook is unset; to anyone else, and for anything else, the real module."""

    def __init__(self, name: str, reader: types.CodeType) -> None:
        super().__init__(name)
        self._reader = reader

    def __getattr__(self, name: str) -> Any:
        if name == "__path__":  # asked by every `from ... import`: a module, not a package
            raise AttributeError(name)
        if name == "GraphLowering" and sys._getframe(1).f_code is self._reader:
            return _UnsetTestHook
        if sys.modules.get(GRAPH) is self:
            del sys.modules[GRAPH]
        return getattr(importlib.import_module(GRAPH), name)


class _RealClass(type):
    def __getattr__(cls, name: str) -> Any:
        return getattr(importlib.import_module(GRAPH).GraphLowering, name)


class _UnsetTestHook(metaclass=_RealClass):
    """What torch's cache hit reads of ``GraphLowering`` in a process that never imported it: the
    hook its tests set is None; any other attribute is the real class's."""

    save_output_code = None
