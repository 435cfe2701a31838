"""What a served entry's guards hold to, told in a form a new process can check: objects described by
what they are, and Dynamo's paths to them (its "sources").

Torch drops the guards it cannot serialize (an object's identity: ID_MATCH, CLOSURE_MATCH,
WEAKREF_ALIVE, DICT_VERSION, and those derived from them); the second pass drops CLASS_MATCH,
FUNCTION_MATCH and MODULE_MATCH too, which torch cannot serialize but keeps. A dropped guard on an object a new process
can tell from any other by what it is (a module, a class, a function with its code, a builtin, an
enum member; an optimizer, by its class) is recorded with its ``describe``d form and its source: Dynamo's name for the path to it,
from the code's globals (``G['F'].gelu``) or from the call's locals (``L['self'].__class__``,
``dict(type(L['self']).__dict__)['forward'].__closure__[0].cell_contents``). ``evaluator`` accepts only
such paths (names, attributes, keys, and Dynamo's ``type``/``dict``/``list`` forms) and compiles them
for evaluation: a shipped index runs no call of its own. ``spoken`` says a source in a user's words.
Standard library only: ``load()``'s path reads it.
"""

from __future__ import annotations

import ast
import enum
import functools
import hashlib
import inspect
import re
import sys
import types
from typing import Any

# The guard types torch drops under caching_precompile (torch/_dynamo/guards.py, 2.9-2.15), and
# those of them a new process can hold to an object it finds again by name.
DROPPED = ("ID_MATCH", "CLOSURE_MATCH", "WEAKREF_ALIVE", "DICT_VERSION")
# Identities torch cannot serialize either, yet keeps (2.13-2.15): a compile guarded so fails to save
# its guards and the whole function is traced (transformers' T5: CLASS_MATCH on
# ``type(L['self']._modules['decoder'].config)``). The second pass drops them as torch drops the others,
# and holds them as it holds those.
HELD_TOO = ("CLASS_MATCH", "FUNCTION_MATCH", "MODULE_MATCH")
DEEPCOPY_MEMO = "deepcopy-memo"  # a held identity guard copy.deepcopy's memo made, held by aliasing
# An optimizer Dynamo holds by identity is held by its class: every part of it the trace read (its
# param groups, its state, its hooks) has guards of its own (run/served/held_objects.py).
OPTIMIZER = "optimizer"
BY_NAME = ("ID_MATCH", "CLOSURE_MATCH", "FUNCTION_MATCH", "CLASS_MATCH", "MODULE_MATCH", "BUILTIN_MATCH")
# What a source may use besides the code's globals (G) and the call's locals (L): Dynamo's forms.
SOURCE_HELPERS = {"type": type, "dict": dict, "list": list}


def describe(value: Any, depth: int = 0) -> dict[str, Any] | None:
    """What ``value`` is, told so that a new process can tell whether the object it has at the same
    source is an equal one: a module by its name; a class by its module and qualified name (not one
    made inside a function: two such are told apart by nothing); a function by those, its code
    (digested), its defaults and what its closure holds; a builtin by its type and names; an enum
    member by its class and name; a code object by its digest; a plain constant by its type and
    value; an optimizer (``torch.optim.Optimizer``'s, not inside another object) by its class.
    None for anything else (an instance, a tensor), which no process can be held to."""
    if depth > 4:
        return None
    if depth == 0 and is_optimizer(value):
        owner = describe(type(value), 1)
        return None if owner is None else {"kind": OPTIMIZER, "class": owner}
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
    named = _by_its_global_name(value)
    if named is not None:  # typing.Union and the like: pickled, and found again, by module and name
        return named
    if isinstance(value, (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                          types.MethodWrapperType, types.ClassMethodDescriptorType)):
        owner = getattr(value, "__self__", None)
        bound = None if owner is None or isinstance(owner, types.ModuleType) else describe(owner, depth + 1)
        return {"kind": "builtin", "type": type(value).__name__, "module": module, "qualname": qualname,
                "self": bound}
    return None


def is_optimizer(value: Any) -> bool:
    """Whether ``value`` is an instance of ``torch.optim.Optimizer`` (read without importing torch)."""
    return not isinstance(value, type) and any(
        klass.__qualname__ == "Optimizer" and klass.__module__ == "torch.optim.optimizer" for klass in type(value).__mro__)


def _by_its_global_name(value: Any) -> dict[str, Any] | None:
    """An object its class pickles by its global name (``__reduce__`` answers a string: ``typing.Union``,
    ``typing.Literal``), where that name of its module is the very object."""
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return None  # told by what they are, above and below
    try:
        reduced = value.__reduce__()
    except Exception:
        return None
    module = getattr(value, "__module__", None)
    if not (isinstance(reduced, str) and isinstance(module, str)):
        return None
    found = sys.modules.get(module)
    return {"kind": "global", "module": module, "name": reduced} if getattr(found, reduced, None) is value else None


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


@functools.lru_cache(maxsize=4096)  # an install asks again for the sources its guarded codes share
def evaluator(source: str) -> tuple[types.CodeType, bool] | None:
    """``source`` compiled for evaluation with ``G`` (the code's globals), ``L`` (the call's locals)
    and SOURCE_HELPERS, and whether it reads the call's locals; None where it is not a path of
    Dynamo's (a name, attributes, keys, ``type(x)``, ``dict(x.__dict__)``, ``dict.__getitem__(x, k)``,
    ``list(dict.keys(x))``): nothing else is ever evaluated, so a shipped index runs no call of its own."""
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError):
        return None
    roots = _path_roots(tree.body)
    if not roots:
        return None
    return compile(tree, "<dynamo source>", "eval"), "L" in roots


def _path_roots(node: ast.expr) -> set[str]:
    """The roots (``G``, ``L``) a path of Dynamo's starts from; empty where ``node`` is not such a path."""
    match node:
        case ast.Name(id="G" | "L" as root):
            return {root}
        case ast.Attribute(value=inner):
            return _path_roots(inner)
        case ast.Subscript(value=inner, slice=ast.Constant(value=key)):
            return _path_roots(inner) if type(key) in (str, int) else set()
        case ast.Subscript(value=inner, slice=ast.Subscript(value=keys, slice=ast.Constant(value=int()))):
            # a dict's key by its position (``d[list(dict.keys(d))[11]]``): a registry filled at import
            mapping_roots = _path_roots(inner)
            keys_roots = _path_roots(keys) if _is_keys_list(keys) else set()
            return mapping_roots | keys_roots if mapping_roots and keys_roots else set()
        case ast.Call(func=ast.Name(id="type"), args=[inner], keywords=[]):
            return _path_roots(inner)
        case ast.Call(func=ast.Name(id="dict"), args=[ast.Attribute(attr="__dict__") as inner], keywords=[]):
            return _path_roots(inner)
        case ast.Call(func=ast.Attribute(value=ast.Name(id="dict"), attr="__getitem__"), args=[mapping, key], keywords=[]):
            mapping_roots, key_roots = _path_roots(mapping), _path_roots(key)
            return mapping_roots | key_roots if mapping_roots and key_roots else set()
        case ast.Call(func=ast.Name(id="list"), keywords=[],
                      args=[ast.Call(func=ast.Attribute(value=ast.Name(id="dict"), attr="keys"), args=[inner], keywords=[])]):
            return _path_roots(inner)
    return set()


def _is_keys_list(node: ast.expr) -> bool:
    match node:
        case ast.Call(func=ast.Name(id="list"), keywords=[],
                      args=[ast.Call(func=ast.Attribute(value=ast.Name(id="dict"), attr="keys"), args=[_], keywords=[])]):
            return True
    return False


def dropped_guard(source: str, guard_type: str, derived: tuple[str, ...], value: Any,
                  has_value: bool, made_at: str | None = None) -> dict[str, Any] | str:
    """One dropped guard as the index records it, or why a call guarded so cannot be served (with
    where the trace made the guard, ``made_at``, where known: what an author would change)."""
    kinds = {guard_type, *derived}
    where = f"; made by {made_at}" if made_at else ""
    if kinds & {"WEAKREF_ALIVE", "DICT_VERSION"}:
        return f"{guard_type} guard on {source} (an object's state, which no new process can check{where})"
    if evaluator(source) is None:
        return f"{guard_type} guard on {source} (reached by a path this version does not evaluate{where})"
    code = "CLOSURE_MATCH" in kinds and isinstance(value, types.FunctionType)  # Dynamo holds its code only
    found = ({"kind": "code", "code": code_digest(value.__code__)} if code else describe(value)) if has_value else None
    if found is None:
        return f"{guard_type} guard on {source} (an object no new process can tell apart from another{where})"
    return {"source": source, "type": guard_type, "code": code, "described": found}


def spoken(source: str) -> str:
    """A source in a user's words: ``L['self']._modules['a']._forward_hooks`` -> ``self.a._forward_hooks``,
    ``G['os'].environ._data[b'HOME']`` -> ``os.environ['HOME']``."""
    said = re.sub(r"\._modules\['([A-Za-z_][A-Za-z0-9_]*)'\]", r".\1", source)
    said = re.sub(r"\._modules\['([^']*)'\]", r"[\1]", said)
    said = re.sub(r"(?<![\w.])[GL]\['([A-Za-z_][A-Za-z0-9_]*)'\]", r"\1", said)
    said = re.sub(r"__import_([A-Za-z0-9_]+)", lambda m: m.group(1).replace("_dot_", "."), said)
    return re.sub(r"\benviron\._data\[b'([^']*)'\]", r"environ['\1']", said)
