"""A shipped Dynamo cache entry read from its pickle without importing what only a compile calls.

Each compiled graph in an entry keeps the keyword arguments Inductor compiled it with, and among
them ``get_decomp_fn``: ``torch._inductor.decomposition.select_decomp_table``, named by reference.
Its module builds every decomposition table as it is imported (0.16 s on this project's 2-core
test machine), and only a compile calls the function (Inductor lowering a new graph); a loaded
graph never does. So, where that module is not imported yet, the entry gets a stand-in: called,
or asked for an attribute, it imports the module and answers with the real function; pickled
again, it is the real function's name.

A tensor a guard was built on keeps the dims its caller marked (``torch._dynamo.mark_dynamic``),
which torch's own pickling drops: ``marked_tensor`` rebuilds it with them (the build's second
pass keeps them so), so that the guards rebuilt here hold torch's subset rule for those marks."""

from __future__ import annotations

import importlib
import io
import pickle
import pkgutil
import sys
import types
from typing import Any

from hatch_precompile.run.torch_internals.patching import enabled
from hatch_precompile.run.torch_internals.registry import lookup


def loads(data: bytes) -> Any:
    """``pickle.loads(data)``, each compile-only function not yet imported read as a stand-in."""
    point = lookup("decomp-table", "answer")
    deferred = {(point.module, point.qualname)} if enabled() and point.module not in sys.modules else set()
    return _Unpickler(io.BytesIO(data), deferred).load()


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, deferred: set[tuple[str, str]]) -> None:
        super().__init__(file)
        self._deferred = deferred

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._deferred and module not in sys.modules:
            return CompileOnly(module, name)
        return super().find_class(module, name)


_FUNCTION_ATTRIBUTES = frozenset(dir(types.FunctionType))


class CompileOnly:
    """``module.name``, a function only a compile calls, imported when first used."""

    def __init__(self, module: str, name: str) -> None:
        self._module, self._name = module, name

    def real(self) -> Any:
        return getattr(importlib.import_module(self._module), self._name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.real()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # A protocol's probe (copy's __deepcopy__, pickle's __setstate__) is not the function's to answer.
        if name in ("_module", "_name") or (name.startswith("__") and name not in _FUNCTION_ATTRIBUTES):
            raise AttributeError(name)
        return getattr(self.real(), name)

    def __copy__(self) -> CompileOnly:  # a function is copied as itself (Inductor deep-copies its entries)
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> CompileOnly:
        return self

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return pkgutil.resolve_name, (f"{self._module}:{self._name}",)

    def __repr__(self) -> str:
        return f"<{self._module}.{self._name}, imported when first called>"


# The attributes torch's marking APIs set on a tensor that its dimension-marking guard reads
# (torch/_dynamo/decorators.py, guards.py: the sets, and the dicts read where unbacked dims are marked).
DIM_MARKS = ("_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices", "_dynamo_unbacked_indices",
             "_dynamo_strict_unbacked_indices", "_dynamo_static_indices", "_dynamo_shape_ids", "_dynamo_unbacked_bounds")


def marked_tensor(rebuild: Any, arguments: tuple[Any, ...], marks: dict[str, Any]) -> Any:
    """The tensor torch's ``rebuild(*arguments)`` makes, with each of ``marks`` set on it as its
    caller had set it when the build traced (sets as sets)."""
    tensor = rebuild(*arguments)
    for name, value in marks.items():
        if name in DIM_MARKS:
            setattr(tensor, name, set(value) if isinstance(value, list) else dict(value))
    return tensor
