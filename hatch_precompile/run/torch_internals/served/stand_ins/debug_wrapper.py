"""``torch.compile`` without its minifier's imports, for the package's served calls.

``torch.compile`` wraps its backend in Dynamo's minifier wrapper (``WrapBackendDebug``, made by
``get_compiler_fn``). Importing that wrapper's module imports Dynamo's debug tools, its test
backends, AOTAutograd and its partitioner with networkx: 0.18 s of a served start on this
project's 2-core test machine, for a wrapper that acts only when Dynamo compiles a graph, which a
served call never does. So, during the package's served ``torch.compile`` calls in a process that
has not imported that module, the wrapper is made by a stand-in. Its constructor is torch's, line
for line: torch's constructor is read from its source file and must be one of those below, else
torch's module is imported. When first called (Dynamo compiles a graph), it makes torch's own
wrapper and passes the call on."""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib
import importlib.util
import sys
from typing import Any, Iterator

from hatch_precompile.run.torch_internals.patching import enabled
from hatch_precompile.run.torch_internals.registry import lookup
from hatch_precompile.run.torch_internals.served.stand_ins.module_stand_in import Unimported, placed

# sha256 of torch's ``WrapBackendDebug`` class, parsed and written back (``ast.unparse``) -> the
# attribute in which its constructor keeps the backend.
KNOWN = {
    "a16d24d8e708b187ca79240f1875d30826958db2033f64042497bcaa0d5afedf": "_torchdynamo_orig_callable",  # 2.7.1
    "876f53c3430581b8ce956204679276f6250b0124f44ac1e50129db5406b62212": "_torchdynamo_orig_backend",  # 2.13.0
    "bad5a76804b8674020664a4be53999a10135900544ff272ea4be727be88d5a3e": "_torchdynamo_orig_backend",  # 2.14.1
}


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within: where torch's minifier module is not imported and its wrapper is one read here, the
    wrapper ``torch.compile`` makes is the stand-in."""
    stand_in = _stand_in()
    end = placed(stand_in) if stand_in is not None else None
    try:
        yield
    finally:
        if end is not None:
            end()


def _stand_in() -> Unimported | None:
    point = lookup("backend-debug", "answer")
    if not enabled() or point.module in sys.modules:
        return None
    try:
        attribute = constructor_kept_in(point.module, point.qualname)
    except Exception:  # no source to read: torch's module is imported
        return None
    return _Unimported(point.module, point.qualname, attribute) if attribute else None


@functools.cache
def constructor_kept_in(module: str, qualname: str) -> str | None:
    """Where ``module.qualname``'s constructor keeps the backend, for a class read here (its source,
    parsed and written back, is one of ``KNOWN``); None for any other."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return None
    with open(spec.origin, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == qualname]
    if len(found) != 1:
        return None
    return KNOWN.get(hashlib.sha256(ast.unparse(found[0]).encode()).hexdigest())


class _Unimported(Unimported):
    """torch's minifier module not imported: its ``wrap_backend_debug`` makes the stand-in; anything
    else asked of it imports the real module and answers from it."""

    def __init__(self, name: str, qualname: str, attribute: str) -> None:
        super().__init__(name, wrap_backend_debug=functools.partial(DebugWrapper, kept_in=(name, qualname, attribute)))


class DebugWrapper:
    """torch's minifier wrapper of a backend, made as torch's constructor makes it; torch's own
    made when first called."""

    def __init__(self, unconfigured_compiler_fn: Any, compiler_name: str | None, *,
                 kept_in: tuple[str, str, str]) -> None:
        object.__setattr__(self, "_hatch_precompile", [kept_in, None])
        # torch's constructor, line for line (but for the attribute's name, which is torch's too)
        functools.wraps(unconfigured_compiler_fn)(self)
        setattr(self, kept_in[2], unconfigured_compiler_fn)
        self._compiler_name = compiler_name
        if hasattr(unconfigured_compiler_fn, "__name__"):
            self.__name__ = unconfigured_compiler_fn.__name__
        if hasattr(unconfigured_compiler_fn, "compiler_name"):
            self.__name__ = unconfigured_compiler_fn.compiler_name
        if hasattr(unconfigured_compiler_fn, "get_compiler_config"):
            self.get_compiler_config = unconfigured_compiler_fn.get_compiler_config

    def torchs(self) -> Any:
        """torch's own wrapper of the same backend, made once."""
        state = self.__dict__["_hatch_precompile"]
        if state[1] is None:
            module, qualname, attribute = state[0]
            wrapper_class = getattr(importlib.import_module(module), qualname)
            state[1] = wrapper_class(getattr(self, attribute), self._compiler_name)
        return state[1]

    def __call__(self, gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        return self.torchs()(gm, example_inputs, **kwargs)
