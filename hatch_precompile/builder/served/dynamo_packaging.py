"""What torch's Dynamo cache cannot package as it stands, made packageable for the build's second
pass (builder/served/dynamo_pass.py hooks each into its touchpoint): a frame that is a property's accessor, a
decorated function kept in a guarded code's state, a module Dynamo's bytecode loads by its address, a
class made inside a function that a type guard holds, a tensor's dims its caller marked dynamic."""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

from hatch_precompile.run.served import local_classes
from hatch_precompile.run.torch_internals import patching
from hatch_precompile.run.torch_internals.served import entry_pickle


def property_accessor(arguments: dict[str, Any]) -> Any:
    """How a new process finds a frame's code that is a property's getter, setter or deleter
    (transformers' ``loss_function``): torch's own lookup stops at the property and raises, which
    fails the whole workload's compile under caching_precompile. The answer is torch's form (the
    qualified name, then the path to the code), walked here as torch walks it when it installs."""
    code = arguments.get("code")
    qualname = getattr(code, "co_qualname", None)  # Python 3.11 on, as torch's own lookup
    module = inspect.getmodule(code) if isinstance(code, types.CodeType) else None
    if module is None or not qualname:
        return patching.PASS
    found: Any = module
    try:
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:
        return patching.PASS
    if not isinstance(found, property):
        return patching.PASS
    for accessor in ("fget", "fset", "fdel"):
        if getattr(getattr(found, accessor), "__code__", None) is code:
            return qualname, f"{accessor}.__code__"
    return patching.PASS


def decorated_function(arguments: dict[str, Any]) -> Any:
    """How a guarded code's state keeps a function whose name finds another object (a decorator's
    wrapper: transformers' ``forward``, the function a call's closure holds): torch keeps a
    placeholder, and then cannot rebuild the guards on the function's closure when it installs the
    entry (``'_Missing' object has no attribute '__closure__'``). Kept instead as torch keeps a
    nested function (its code, module, defaults and closure), rebuilt from them when it installs,
    with its ``__name__`` set again: torch's rebuild names it by its qualname, and guards rebuilt on
    it (transformers reads ``func.__name__``) would then hold a name no call brings. A nested
    function, which torch keeps so itself, gets its ``__name__`` kept the same way. What
    ``torch.compile`` returned is left to torch."""
    pickler, obj = arguments.get("self"), arguments.get("obj")
    rebuild = getattr(type(pickler), "_unpickle_nested_function", None)
    if rebuild is None or not isinstance(obj, types.FunctionType):
        return patching.PASS
    if any(id(obj) in getattr(pickler, kept, {}) for kept in ("empty_values", "missing_values")):
        return patching.PASS  # torch's own choice for it comes first
    if hasattr(obj, "_torchdynamo_orig_callable"):
        # What torch.compile returned (transformers keeps it on the model, ``_compiled_call``): named as
        # the function it compiles, it is no decorator's wrapper, and its closure holds the compiled
        # graphs, which do not pickle. Torch keeps its own placeholder for it.
        return patching.PASS
    if "<locals>" not in obj.__qualname__:
        found: Any = sys.modules.get(obj.__module__)
        for part in obj.__qualname__.split(".") if found is not None else ():
            found = getattr(found, part, None)
        if found is obj or found is None:
            return patching.PASS
    arguments_ = (obj.__code__, obj.__module__, obj.__qualname__, obj.__defaults__, obj.__closure__)
    return rebuild, arguments_, (None, {"__name__": obj.__name__})  # pickle's BUILD: setattr of each


def module_as_import(arguments: dict[str, Any], name: Any) -> None:
    """Dynamo's bytecode loads a module that the frame's globals do not hold under its own name by a
    global named from the module's address (``___module_collections_<id>_c12``), which torch does
    not save with the entry: recorded as one of the entry's imports, it is installed with it."""
    output, value = arguments.get("self"), arguments.get("value")
    package = getattr(output, "package", None)
    if isinstance(value, types.ModuleType) and isinstance(name, str) and package is not None:
        package.add_import_source(name, value.__name__)


def local_class(arguments: dict[str, Any]) -> Any:
    """How a guarded code's state keeps a class made inside a function (a type guard's class: the
    `kernels` package's ``_create_func_module.<locals>.Func``, which transformers' Llama calls), which
    pickle cannot find by name: as the type of a module's global holding an object of it, checked
    against the class's description when a new process finds it (run/served/local_classes.py). A
    module object of such a class is kept with it, where torch keeps a plain ``torch.nn.Module``."""
    pickler, obj = arguments.get("self"), arguments.get("obj")
    cls = obj if isinstance(obj, type) else type(obj)
    if "<locals>" not in getattr(cls, "__qualname__", ""):  # pickle finds it by name: torch's to keep
        return patching.PASS
    found = local_classes.kept(cls)
    if found is None:
        return patching.PASS
    if cls is obj:
        return local_classes.type_of_global, found
    return _module_object(pickler, obj, found)


def _module_object(pickler: Any, obj: Any, found: tuple[str, str, str]) -> Any:
    """A module object of a kept class, where torch keeps one (its guards read it) and its state is
    the module's own; what its guards do not read is left out as torch leaves it out."""
    import torch

    tree, missing = getattr(pickler, "guard_tree_values", None), getattr(pickler, "missing_values", None)
    if (not isinstance(obj, torch.nn.Module) or not isinstance(tree, dict) or not isinstance(missing, dict)
            or id(obj) not in tree or type(obj).__getstate__ is not torch.nn.Module.__getstate__):
        return patching.PASS
    for value in obj.__dict__.values():  # as torch's own reducer: a value no guard reads is not kept
        if not isinstance(value, (torch.Tensor, torch.nn.Module)) and id(value) not in tree and not callable(value):
            missing[id(value)] = value
    return local_classes.module_of_global_type, (*found, obj.__getstate__())


def local_type_kept(arguments: dict[str, Any]) -> Any:
    """Torch refuses a type guard on a class made inside a function before it pickles anything; a
    class ``local_class`` keeps is let through (None), any other is refused by torch (PASS)."""
    return patching.PASS if local_classes.kept(type(arguments.get("obj"))) is None else None


def marked_tensor(arguments: dict[str, Any]) -> Any:
    """How a guarded code's state keeps a tensor whose caller marked its dims (``mark_dynamic``): torch
    keeps the tensor without the marks, and its guard rebuilt from that state then holds that no dim
    is marked, so that every call with a marked tensor (the workload's own calling style) traces.
    Kept with its marks, rebuilt by torch's own reduction (run/torch_internals/served/entry_pickle.py)."""
    pickler, obj = arguments.get("self"), arguments.get("obj")
    import torch

    if not isinstance(obj, torch.Tensor) or obj.device.type == "meta":
        return patching.PASS
    marks: dict[str, Any] = {}
    for name in entry_pickle.DIM_MARKS:
        value = getattr(obj, name, None)
        if isinstance(value, (set, frozenset)) and all(type(v) is int for v in value):
            marks[name] = sorted(value)
        elif isinstance(value, dict):
            marks[name] = dict(value)
        elif value is not None:
            return patching.PASS  # a mark of another shape: torch's own answer
    torchs = getattr(getattr(type(pickler), "reducer_override", None), "__wrapped__", None)
    if not marks or torchs is None:
        return patching.PASS
    reduced = torchs(pickler, obj)
    if not (isinstance(reduced, tuple) and len(reduced) == 2 and callable(reduced[0])
            and getattr(reduced[0], "__name__", "").startswith("_unpickle")):
        return patching.PASS  # torch keeps no tensor here (a value no guard reads): its answer stands
    return entry_pickle.marked_tensor, (reduced[0], reduced[1], marks)
