"""A class made inside a function, found again in a new process as the type of a module's global.

Torch saves a type guard (``TYPE_MATCH``) by pickling the class, which pickle finds by its module and
qualified name; a class made inside a function has no such name, so torch refuses the whole compile
("cannot be saved into torch.compile() package since it's defined in local scope"). The `kernels`
package, which transformers 5.25 requires, makes one for each function it wraps
(``_create_func_module.<locals>.Func``) and leaves an instance of it at the function's global name:
every Llama-family attention calls one (``apply_rotary_pos_emb``).

The build keeps such a class as the type of the object at that global (its module and name), with
the class described by what it holds: its bases, and each attribute, a function by its code and
closure (``dynamo_sources.describe``). Here the class is the type of what that global holds now, and
only where it is described the same; anything else raises, torch cannot install that entry, and the
call is traced. Standard library only: torch unpickles this while it installs an entry.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from typing import Any

from hatch_precompile.protocol import dynamo_sources

# What every class holds of its own, told by nothing the trace read.
_OWN = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__"})


def described(cls: type) -> dict[str, Any] | None:
    """A class made inside a function, told by its bases and its attributes; None where any of them
    cannot be told from another (an instance, a mutable object)."""
    bases = [dynamo_sources.describe(base) for base in cls.__bases__]
    attributes: dict[str, Any] = {}
    for name, value in sorted(vars(cls).items()):
        if name in _OWN:
            continue
        if isinstance(value, (staticmethod, classmethod)):
            inner = dynamo_sources.describe(value.__func__)
            attributes[name] = None if inner is None else {"kind": type(value).__name__, "function": inner}
        else:
            attributes[name] = dynamo_sources.describe(value)
    if None in bases or None in attributes.values():
        return None
    return {"module": cls.__module__, "qualname": cls.__qualname__, "metaclass": dynamo_sources.describe(type(cls)),
            "bases": bases, "attributes": attributes}


def global_of(cls: type) -> tuple[str, str] | None:
    """A module's global (its module and name) whose object is of ``cls``, a class made inside a
    function, in the order a new process finds the same: the class's own module first."""
    if not inspect.isclass(cls) or "<locals>" not in cls.__qualname__:
        return None
    known = _found.get(id(cls))
    if known is not None and type(getattr(sys.modules.get(known[0]), known[1], None)) is cls:
        return known  # a guards state pickles the class and each module object of it: one search a class
    names = [cls.__module__] + sorted(name for name in list(sys.modules) if name != cls.__module__)
    for module_name in names:
        module = sys.modules.get(module_name)
        for name, value in sorted(getattr(module, "__dict__", {}).items()) if module is not None else ():
            if type(value) is cls:
                _found[id(cls)] = (module_name, name)
                return module_name, name
    return None


_found: dict[int, tuple[str, str]] = {}  # by the class's id, checked again before it is used


def kept(cls: type) -> tuple[str, str, str] | None:
    """How the build keeps ``cls``: the global holding an object of it and its description (JSON), as
    ``type_of_global`` takes them; None where it cannot be kept (torch's refusal stands)."""
    found = global_of(cls)
    description = described(cls) if found is not None else None
    return None if found is None or description is None else (*found, json.dumps(description, sort_keys=True))


def type_of_global(module: str, name: str, description: str) -> type:
    """The class of the object at ``module.name`` now, where it is described as the build's class
    (``description``, JSON); raises otherwise, and torch then cannot install the entry."""
    found = type(getattr(importlib.import_module(module), name))
    if _matched.get((module, name, description)) is found:
        return found  # an entry's state holds the class once per module object of it: described once
    if described(found) != json.loads(description):
        raise TypeError(f"{module}.{name} is of {found.__qualname__}, not the class the build's compile was "
                        "guarded on (another class made inside a function, or one changed since)")
    _matched[(module, name, description)] = found
    return found


_matched: dict[tuple[str, str, str], type] = {}  # each global's class found described as the build's


def module_of_global_type(module: str, name: str, description: str, state: dict[str, Any]) -> Any:
    """A module object of the class ``type_of_global`` finds, with the build's ``state`` (its
    ``__dict__``, as ``torch.nn.Module.__setstate__`` takes it): what torch's own rebuild, a plain
    ``torch.nn.Module``, loses is its class, and with it the methods a guard reads."""
    found = type_of_global(module, name, description)
    new: Any = found.__new__  # as pickle makes an object before its state: no __init__ runs
    rebuilt = new(found)
    rebuilt.__dict__.update(state)
    return rebuilt
