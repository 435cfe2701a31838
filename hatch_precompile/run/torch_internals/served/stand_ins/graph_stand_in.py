"""A served graph loaded without Inductor's lowerings. On a cache hit, torch's
``FxGraphCache.cache_hit_post_compile`` imports ``torch._inductor.graph`` only to read a test hook,
``GraphLowering.save_output_code``; that import brings in the lowerings and every kernel template
(about 100 modules: half a second on this project's 2-core test machine). The hook is None in any process that has not
imported the module: no one can have set it. So while a graph loads in such a process, a stand-in
module answers that one read, and anything else asked of it imports the real module and answers
from it. Loaded code reads ``torch._inductor.debug`` as an attribute at each call (the lowerings'
imports bring it in otherwise): where it is not imported, the package's attribute is a stand-in
that answers each of the module's constants with its value as the module sets it at import (read
from its source), and imports the real module for anything else; importing it puts the real
module in its place."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import sys
from typing import Any, Callable

from hatch_precompile.run.torch_internals.patching import wrap
from hatch_precompile.run.torch_internals.registry import lookup
from hatch_precompile.run.torch_internals.served.stand_ins import extension_paths
from hatch_precompile.run.torch_internals.served.stand_ins.module_stand_in import Unimported, placed

GRAPH = "torch._inductor.graph"
DEBUG = "torch._inductor.debug"


def install() -> None:
    """From now on, each graph torch loads from its cache in this process, where the lowerings are
    not imported yet, loads without them."""
    wrap("post-compile-graph", around=_stand_in)
    extension_paths.install()  # and the kernels' compile commands, without torch's extension builder


def _stand_in(arguments: dict[str, Any]) -> Callable[[], None] | None:
    if GRAPH in sys.modules:
        return None
    point = lookup("post-compile-graph", "wrap")
    _debug_constants()
    reader = sys.modules[point.module].FxGraphCache.cache_hit_post_compile
    code = getattr(getattr(reader, "__wrapped__", None), "__code__", None)
    if code is None:  # not torch's function under this package's wrapper: the real module is imported
        return None
    return placed(_Unimported(GRAPH, _reader=code))


class _Unimported(Unimported):
    """``torch._inductor.graph`` not imported: to torch's cache-hit function, a ``GraphLowering``
    whose test hook is unset; to anyone else, and for anything else, the real module."""

    def __getattr__(self, name: str) -> Any:
        if name == "GraphLowering" and sys._getframe(1).f_code is self._reader:
            return _UnsetTestHook
        return super().__getattr__(name)


class _RealClass(type):
    def __getattr__(cls, name: str) -> Any:
        return getattr(importlib.import_module(GRAPH).GraphLowering, name)


class _UnsetTestHook(metaclass=_RealClass):
    """What torch's cache hit reads of ``GraphLowering`` in a process that never imported it: the
    hook its tests set is None; any other attribute is the real class's."""

    save_output_code = None


def _debug_constants() -> None:
    """``torch._inductor.debug``, as the package's attribute the loaded code reads: the real module
    where it is imported or its constants cannot be read, else a stand-in answering them."""
    package = sys.modules.get(DEBUG.rpartition(".")[0])
    if DEBUG in sys.modules or package is None or hasattr(package, DEBUG.rpartition(".")[2]):
        return
    try:
        constants = module_constants(DEBUG)
    except Exception:  # no source to read: the real module
        constants = None
    if constants:
        setattr(package, DEBUG.rpartition(".")[2], _Constants(DEBUG, _constants=constants))
    else:
        importlib.import_module(DEBUG)


@functools.cache
def module_constants(name: str) -> dict[str, Any]:
    """Each name the module ``name`` binds once as it is imported, to a literal, with that literal: a
    top-level assignment no other top-level statement rebinds, nor a function its top level calls."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        return {}
    with open(spec.origin, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    functions = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    # what runs at import: every top-level statement but a function's body (class bodies run, and any
    # name they bind counts against a constant of that name: conservative)
    at_import = [node for statement in tree.body if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for node in ast.walk(statement)]
    called = {node.func.id for node in at_import if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    rebound = {n for f in called & set(functions) for node in ast.walk(functions[f])
               if isinstance(node, (ast.Global, ast.Nonlocal)) for n in node.names}
    bindings: dict[str, list[ast.AST]] = {}
    for node in at_import:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr, ast.For, ast.With,
                             ast.Import, ast.ImportFrom, ast.Delete)):
            for target in ast.walk(node):
                if isinstance(target, ast.Name) and isinstance(target.ctx, (ast.Store, ast.Del)):
                    bindings.setdefault(target.id, []).append(node)
                elif isinstance(target, ast.alias):
                    bindings.setdefault((target.asname or target.name).split(".")[0], []).append(node)
    constants = {}
    for bound, nodes in bindings.items():
        only = nodes[0] if len(nodes) == 1 else None
        if bound not in rebound and isinstance(only, (ast.Assign, ast.AnnAssign)) and only in tree.body \
                and isinstance(only.value, ast.Constant):
            constants[bound] = only.value.value
    return constants


class _Constants(Unimported):
    """A module not imported, as its package's attribute: its constants as it sets them at import;
    for anything else, any change, and everything once it is imported, the real module."""

    def __getattr__(self, name: str) -> Any:
        if name not in self._constants or self.__name__ in sys.modules:
            return super().__getattr__(name)
        return self._constants[name]
