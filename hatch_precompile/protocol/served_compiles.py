"""``dynamo/served.json``: the package's own ``torch.compile`` calls, shipped as torch's Dynamo cache
entries, and what each entry's guards lost on the way.

The build's second pass (build/dynamo_pass.py) runs the workloads with torch's
``caching_precompile`` and writes one entry per compiled function (``dynamo/<key>.entry``, torch's
pickled ``PrecompileCacheEntry``), keyed as torch keys it: the sha256 of the function's qualified
name and first line (``source_key``). Torch drops the guards it cannot serialize (an object's
identity: ID_MATCH, CLOSURE_MATCH, WEAKREF_ALIVE, DICT_VERSION, and those derived from them). For
each guarded code of each entry, this index lists what was dropped and, where the object is one a
new process can tell from any other by what it is (a module, a class, a function with its code, a
builtin, an enum member), its ``described`` form. Its source is Dynamo's name for the path to it,
from the code's globals (``G['F'].gelu``) or from the call's locals (``L['self'].__class__``,
``dict(type(L['self']).__dict__)['forward'].__closure__[0].cell_contents``): ``evaluator`` accepts
only such paths (names, attributes, keys, and Dynamo's ``type``/``dict``/``list`` forms) and
compiles them for evaluation. At run time (run/torch_internals/dynamo_cache.py) the object at the
same source must be described the same, and is then held to by identity at every call. A guarded
code that dropped anything else is ``unservable``: it is never installed, and such a call is traced
by Dynamo as without hatch-precompile. Standard library only: ``load()``'s path reads it.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import hashlib
import inspect
import json
import sys
import types
from typing import Any

from hatch_precompile.errors import ServedError

SERVED_FORMAT = 1
# The guard types torch drops under caching_precompile (torch/_dynamo/guards.py, 2.9-2.15), and
# those of them a new process can hold to an object it finds again by name.
DROPPED = ("ID_MATCH", "CLOSURE_MATCH", "WEAKREF_ALIVE", "DICT_VERSION")
BY_NAME = ("ID_MATCH", "CLOSURE_MATCH", "FUNCTION_MATCH", "CLASS_MATCH", "MODULE_MATCH", "BUILTIN_MATCH")
# What a source may use besides the code's globals (G) and the call's locals (L): Dynamo's forms.
SOURCE_HELPERS = {"type": type, "dict": dict, "list": list}


@dataclasses.dataclass(frozen=True)
class Function:
    """One compiled function: where it is, its entry, the options and guards it was compiled with."""

    module: str
    qualname: str
    firstlineno: int
    entry: str  # the entry's logical path in the set
    options: tuple[dict[str, Any], ...]  # the keywords of each torch.compile call that compiled it, as given
    guarded: dict[str, Any]  # sha256 of a guarded code's guards -> [dropped guard], or a reason (unservable)


def source_key(qualname: str, firstlineno: int) -> str:
    """The key torch's Dynamo cache gives a function (``CompilePackage.source_id_from_fn``)."""
    digest = hashlib.sha256()
    digest.update(qualname.encode())
    digest.update(str(firstlineno).encode())
    return digest.hexdigest()


def innermost(fn: Any) -> Any:
    """What torch.compile compiles of ``fn``: a module's ``forward``, inside any compiled wrapper."""
    while hasattr(fn, "_torchdynamo_orig_callable"):
        fn = fn._torchdynamo_orig_callable
    if _is_module(fn):
        fn = fn.forward
    return fn


def function_key(fn: Any) -> tuple[str, str, str, int] | None:
    """(source_key, module, qualname, first line) of what torch.compile would compile, or None."""
    fn = innermost(fn)
    code = getattr(fn, "__code__", None)
    qualname = getattr(fn, "__qualname__", None)
    module = getattr(getattr(fn, "__func__", fn), "__module__", None)
    if not isinstance(code, types.CodeType) or not isinstance(qualname, str) or not isinstance(module, str):
        return None
    return source_key(qualname, code.co_firstlineno), module, qualname, code.co_firstlineno


def takes(function: Function, options: dict[str, Any]) -> bool:
    """Whether a ``torch.compile`` call with keywords ``options`` is one the build compiled ``function``
    with (each side with torch's defaults filled in, so that a default given or left out is the same)."""
    key = options_key(options)
    return key is not None and key in {options_key(given) for given in function.options}


def options_key(options: dict[str, Any]) -> str | None:
    """torch.compile's keywords as one comparable string, or None where one is not plain data (a
    backend given as a callable, say): such a call is never served."""
    plain: dict[str, Any] = {"fullgraph": False, "dynamic": None, "backend": "inductor", "mode": None, "options": None,
                             "disable": False, "name": None, "recompile_limit": None, "isolate_recompiles": False}
    for name, value in options.items():
        if name not in plain:
            return None
        plain[name] = value
    try:
        return json.dumps(plain, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _is_module(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


# -- descriptions: what a dropped guard held to, told by what it is --------------------------------


def describe(value: Any, depth: int = 0) -> dict[str, Any] | None:
    """What ``value`` is, told so that a new process can tell whether the object it has at the same
    source is an equal one: a module by its name; a class by its module and qualified name (not one
    made inside a function: two such are told apart by nothing); a function by those, its code
    (digested), its defaults and what its closure holds; a builtin by its type and names; an enum
    member by its class and name; a code object by its digest; a plain constant by its type and
    value. None for anything else (an instance, a tensor), which no process can be held to."""
    if depth > 4:
        return None
    if type(value) in (type(None), bool, int, float, str, bytes):  # not a subclass: its methods may be anything
        return {"kind": "value", "repr": repr(value)}
    if isinstance(value, enum.Enum):
        owner = describe(type(value), depth + 1)
        return None if owner is None else {"kind": "enum", "class": owner, "name": value.name}
    if isinstance(value, types.CodeType):
        return {"kind": "code", "code": code_digest(value)}
    if isinstance(value, tuple):
        items = [describe(item, depth + 1) for item in value]
        return None if None in items else {"kind": "tuple", "items": items}
    if isinstance(value, types.ModuleType):
        name = getattr(value, "__name__", None)
        return {"kind": "module", "name": name} if isinstance(name, str) else None
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if inspect.isclass(value):
        if not isinstance(qualname, str) or "<locals>" in qualname:
            return None
        return {"kind": "class", "module": module, "qualname": qualname, "meta": type(value).__qualname__}
    if isinstance(value, types.FunctionType):
        parts = []
        for cell in value.__closure__ or ():
            try:
                parts.append(describe(cell.cell_contents, depth + 1))
            except ValueError:  # an empty cell
                parts.append({"kind": "empty"})
        defaults = describe(value.__defaults__, depth + 1)
        keywords = describe(tuple(sorted((value.__kwdefaults__ or {}).items())), depth + 1)
        if None in parts or defaults is None or keywords is None:
            return None
        return {"kind": "function", "module": module, "qualname": qualname, "code": code_digest(value.__code__),
                "closure": parts, "defaults": defaults, "kwdefaults": keywords}
    if isinstance(value, (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                          types.MethodWrapperType, types.ClassMethodDescriptorType)):
        owner = getattr(value, "__self__", None)
        bound = None if owner is None or isinstance(owner, types.ModuleType) else describe(owner, depth + 1)
        return {"kind": "builtin", "type": type(value).__name__, "module": module, "qualname": qualname,
                "self": bound}
    return None


def code_digest(code: types.CodeType) -> str:
    """A digest of what a code object does: its instructions, names and constants (nested code by
    its own digest, sets in order), none of its line numbers or its address."""
    digest = hashlib.sha256()
    for part in (code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                 code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount, code.co_flags):
        digest.update(repr(part).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            digest.update(code_digest(const).encode())
        elif isinstance(const, frozenset):
            digest.update(repr(sorted(map(repr, const))).encode())
        else:
            digest.update(repr(const).encode())
    return digest.hexdigest()


def evaluator(source: str) -> tuple[types.CodeType, bool] | None:
    """``source`` compiled for evaluation with ``G`` (the code's globals), ``L`` (the call's locals)
    and SOURCE_HELPERS, and whether it reads the call's locals; None where it is not a path of
    Dynamo's (a name, attributes, keys, ``type(x)``, ``dict(x.__dict__)``, ``dict.__getitem__(x, k)``,
    ``list(dict.keys(x))``): nothing else is ever evaluated, so a shipped index runs no call of its own."""
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError):
        return None
    if not _is_path(tree.body):
        return None
    local = any(isinstance(node, ast.Name) and node.id == "L" for node in ast.walk(tree))
    return compile(tree, "<dynamo source>", "eval"), local


def _is_path(node: ast.expr) -> bool:
    match node:
        case ast.Name(id="G" | "L"):
            return True
        case ast.Attribute(value=inner):
            return _is_path(inner)
        case ast.Subscript(value=inner, slice=ast.Constant(value=key)):
            return type(key) in (str, int) and _is_path(inner)
        case ast.Call(func=ast.Name(id="type"), args=[inner], keywords=[]):
            return _is_path(inner)
        case ast.Call(func=ast.Name(id="dict"), args=[ast.Attribute(attr="__dict__") as inner], keywords=[]):
            return _is_path(inner)
        case ast.Call(func=ast.Attribute(value=ast.Name(id="dict"), attr="__getitem__"), args=[mapping, key], keywords=[]):
            return _is_path(mapping) and _is_path(key)
        case ast.Call(func=ast.Name(id="list"), keywords=[],
                      args=[ast.Call(func=ast.Attribute(value=ast.Name(id="dict"), attr="keys"), args=[inner], keywords=[])]):
            return _is_path(inner)
    return False


def dropped_guard(source: str, guard_type: str, derived: tuple[str, ...], value: Any,
                  has_value: bool) -> dict[str, Any] | str:
    """One dropped guard as the index records it, or why a call guarded so cannot be served."""
    kinds = {guard_type, *derived}
    if kinds & {"WEAKREF_ALIVE", "DICT_VERSION"}:
        return f"{guard_type} guard on {source} (an object's state, which no new process can check)"
    if evaluator(source) is None:
        return f"{guard_type} guard on {source} (reached by a path this version does not evaluate)"
    code = "CLOSURE_MATCH" in kinds and isinstance(value, types.FunctionType)  # Dynamo holds its code only
    found = ({"kind": "code", "code": code_digest(value.__code__)} if code else describe(value)) if has_value else None
    if found is None:
        return f"{guard_type} guard on {source} (an object no new process can tell apart from another)"
    return {"source": source, "type": guard_type, "code": code, "described": found}


# -- the index file --------------------------------------------------------------------------------


def dumps(settings: str | None, functions: dict[str, Function]) -> str:
    """The index: the compiler settings' digest the entries were compiled under, and the functions."""
    return json.dumps({"format": SERVED_FORMAT, "settings": settings,
                       "functions": {k: dataclasses.asdict(f) for k, f in sorted(functions.items())}}, indent=1)


def parse(text: str | bytes) -> tuple[str, dict[str, Function]]:
    """(the compiler settings' digest its entries were compiled under, its functions by source key);
    ServedError where it is not an index of this format, with the field named."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ServedError(f"served.json does not parse: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != SERVED_FORMAT:
        raise ServedError(f"served.json is not of format {SERVED_FORMAT} (built by another hatch-precompile)")
    functions = {}
    for key, raw in (data.get("functions") or {}).items():
        try:
            function = Function(module=_str(raw["module"]), qualname=_str(raw["qualname"]),
                                firstlineno=int(raw["firstlineno"]), entry=_str(raw["entry"]),
                                options=tuple(_keywords(o) for o in raw["options"]), guarded=_guarded(raw["guarded"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ServedError(f"served.json: function {key!r}: {exc!r}") from None
        if source_key(function.qualname, function.firstlineno) != key:
            raise ServedError(f"served.json: function {key!r} is not keyed by its name and line")
        functions[key] = function
    settings = data.get("settings")
    if not isinstance(settings, str):
        raise ServedError("served.json does not say which compiler settings its entries were compiled under")
    return settings, functions


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _keywords(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"{value!r} is not an object of keywords")
    return dict(value)


def _guarded(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("`guarded` is not an object")
    checked: dict[str, Any] = {}
    for sha, dropped in value.items():
        if isinstance(dropped, str):
            checked[_str(sha)] = dropped
            continue
        if not isinstance(dropped, list):
            raise TypeError(f"guarded code {sha!r} is neither a list nor a reason")
        for guard in dropped:
            if not (isinstance(guard, dict) and isinstance(guard.get("source"), str) and evaluator(guard["source"])
                    and isinstance(guard.get("described"), dict)):
                raise ValueError(f"guarded code {sha!r} has a guard that is not one this version can hold: {guard!r}")
        checked[_str(sha)] = dropped
    return checked
