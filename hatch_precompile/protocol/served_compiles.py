"""``dynamo/served.json``: the package's compiled functions (its own ``torch.compile`` calls, and those
a library makes on its behalf: ``made_by``), shipped as torch's Dynamo cache entries, and for each
guarded code what its trace read, so that it runs only where all of it is the same in the user's
process as in the build's.

The build's second pass (builder/served/dynamo_pass.py) runs the workloads with torch's
``caching_precompile`` and writes one entry per compiled function (``dynamo/<key>.entry``, torch's
pickled ``PrecompileCacheEntry``), keyed as torch keys it: the sha256 of the function's qualified
name and first line (``source_key``). For each guarded code (by the sha256 of its guards' state),
the index holds either why it can never be served, or:

- ``held``: the identity guards torch dropped, each held to an object told by what it is
  (protocol/dynamo_sources.py), or, for those ``copy.deepcopy``'s memo made, by how the objects
  alias one another (builder/served/guard_sites.py), checked at each call;
- ``reads``: what the trace read that no guard of torch's holds, checked once, when the code is
  first about to run (run/served/unguarded_reads.py): a dict key it found absent (``os.environ``'s, say),
  a hook dict it found empty, a process fact torch folded into the code (``torch.distributed.
  is_initialized()``);
- ``settings``: the digest of the compiler settings it compiled under (their values in the index's
  ``settings``, by digest), checked at the same moment.

Beside each entry, ``dynamo/<key>.guards`` holds its guarded codes' guards as torch rebuilds them,
in words (run/torch_internals/served/guard_text.py), compared with those torch rebuilds at install. The
index also holds the Python optimization level the build's bytecode was compiled at (``python -O``
strips asserts). Standard library only: ``load()``'s path reads it.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import sys
import types
from typing import Any

from hatch_precompile.errors import ServedError
from hatch_precompile.protocol import dynamo_sources

SERVED_FORMAT = 2
# Calls whose result torch folds into the code it traces, with no guard (torch/_dynamo/variables/
# torch.py's constant_fold_functions), that tell one process from another. Called with no argument.
FOLDED_FACTS = ("torch.distributed.is_available", "torch.distributed.is_initialized", "torch.distributed.get_rank",
                "torch.distributed.get_world_size", "torch.cuda.is_available", "torch.accelerator.is_available",
                "torch.xpu.is_available", "torch._C._get_privateuse1_backend_name")
READ_KINDS = ("absent", "empty", "fact")


@dataclasses.dataclass(frozen=True)
class Function:
    """One compiled function: where it is, its entry and guards, the options and guards it was compiled with."""

    module: str
    qualname: str
    firstlineno: int
    entry: str  # the entry's logical path in the set
    guards: str  # its guarded codes' guards in words (guard_text.packed), the file's logical path
    options: tuple[dict[str, Any], ...]  # the keywords of the torch.compile call that compiled it, as given
    guarded: dict[str, Any]  # sha256 of a guarded code's guards -> {"held", "reads", "settings"}, or a reason
    # When its entry is installed: at torch.compile; at the compiled object's first call, where the
    # build's proof found torch could not rebuild its guards before (a registry filled as models are
    # made); or as soon as its module is imported (the package loaded), where the proof installed it
    # then: a module the package compiles at its first use then starts its first step installed.
    install_at: str = "compile"
    # Where another library's ``torch.compile`` made it on the package's behalf: that call's module,
    # function and line (transformers' ``PreTrainedModel.get_compiled_call`` inside ``generate``);
    # None for the package's own call. Served only where that same call compiles it, at a call the
    # package's code is running.
    made_by: dict[str, Any] | None = None
    # Where its compiles compiled one method for modules of two classes or more (``module.compile()``
    # compiles torch's ``Module._call_impl`` for every class): each class's own entry (by the class's
    # module and qualified name), installed by a compile of a module of that class; ``entry`` is the first.
    parts: dict[str, str] = dataclasses.field(default_factory=dict)
    part: str = ""  # the run's, never written: the class of ``parts`` this view of it installs

    @property
    def name(self) -> str:
        """How ``served()``, the build and ``report`` name it: the function, and the library call that
        compiled it where that was not the package's."""
        named = f"{self.module}.{self.qualname}"
        return named if self.made_by is None else f"{named}, compiled by {site_name(self.made_by)}"


INSTALL_AT = ("compile", "first-call", "import")


# torch.compile called by torch itself on its caller's behalf: ``nn.Module.compile()`` compiles the
# module's ``_call_impl`` for whoever called ``module.compile()``, whose compile it is.
_ON_BEHALF = frozenset({("torch.nn.modules.module", "Module.compile"), ("torch.nn.modules.module", "compile")})


def caller(frame: Any) -> Any:
    """The frame whose ``torch.compile`` call ``frame`` makes: itself, or, where ``frame`` is torch's
    own ``Module.compile``, the frame that called it."""
    while frame is not None and (frame.f_globals.get("__name__"), getattr(frame.f_code, "co_qualname",
                                                                          frame.f_code.co_name)) in _ON_BEHALF:
        frame = frame.f_back
    return frame


def site(frame: Any) -> dict[str, Any]:
    """Where a call is made: the module, the function (its qualified name) and the line of ``frame``."""
    code = frame.f_code
    return {"module": str(frame.f_globals.get("__name__") or ""), "function": getattr(code, "co_qualname", code.co_name),
            "line": int(frame.f_lineno or 0)}


def site_name(made_by: dict[str, Any]) -> str:
    return f"{made_by['module']}.{made_by['function']} (line {made_by['line']})"


def same_site(made_by: dict[str, Any] | None, here: dict[str, Any]) -> bool:
    """Whether a call made ``here`` is the one that made a function (its module and function; a line
    moves with any edit above it, and the entry's own source check holds the rest)."""
    return made_by is not None and (made_by["module"], made_by["function"]) == (here["module"], here["function"])


@dataclasses.dataclass(frozen=True)
class Index:
    """The whole of served.json."""

    optimize: int  # sys.flags.optimize of the build
    settings: dict[str, dict[str, Any]]  # digest -> the compiler settings (compiler_settings.snapshot)
    functions: dict[str, Function]
    # Each compiled function the build did not ship (by its name), and why: said by ``served()``
    # where the package compiles it, rather than left out.
    not_served: dict[str, str] = dataclasses.field(default_factory=dict)


def source_key(qualname: str, firstlineno: int) -> str:
    """The key torch's Dynamo cache gives a function (``CompilePackage.source_id_from_fn``)."""
    digest = hashlib.sha256()
    digest.update(qualname.encode())
    digest.update(str(firstlineno).encode())
    return digest.hexdigest()


def class_name(obj: Any) -> str:
    """How ``parts`` names the class of ``obj``."""
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def part_for(function: Function, model: Any) -> Function:
    """The view of ``function`` a compile of ``model`` installs: itself, or where it is split by class,
    the part of the class of the module whose method ``model`` is (its ``entry`` empty where the build
    compiled no module of that class)."""
    if not function.parts:
        return function
    owner = getattr(innermost(model), "__self__", None)
    label = class_name(owner) if owner is not None else "(no module)"
    return dataclasses.replace(function, entry=function.parts.get(label, ""), part=label)


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


def optimization() -> int:
    """This process's Python optimization level (``-O``: 1, ``-OO``: 2): the bytecode it runs."""
    return sys.flags.optimize


def _is_module(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


# -- what a trace read that no guard holds -----------------------------------------------------------


def absent(source: str, key: Any) -> dict[str, Any] | str:
    """A dict key the trace looked up and did not find (its code took the missing branch), or why
    no new process can check it."""
    if type(key) not in (str, bytes, int, bool, float, type(None)):
        return f"the trace looked up a key of type {type(key).__name__} in {dynamo_sources.spoken(source)}, which no new process can name"
    if dynamo_sources.evaluator(source) is None:
        return f"the trace looked up a key in {source} (reached by a path this version does not evaluate)"
    return {"kind": "absent", "source": source, "key": repr(key)}


def empty(source: str) -> dict[str, Any] | str:
    """A hook dict the trace found empty (torch does not guard it: ``skip_nnmodule_hook_guards``)."""
    if dynamo_sources.evaluator(source) is None:
        return f"the trace read the hooks {source} (reached by a path this version does not evaluate)"
    return {"kind": "empty", "source": source}


def fact(call: str, answered: str | None, raised: str | None) -> dict[str, Any]:
    """A FOLDED_FACTS call the trace folded, and what it answered (its repr), or the exception it raised."""
    return {"kind": "fact", "call": call, "value": answered, "raised": raised}


def key_of(read: dict[str, Any]) -> Any:
    """An ``absent`` read's key, as the trace looked it up."""
    return ast.literal_eval(read["key"])


def _read(read: Any) -> dict[str, Any]:
    if not isinstance(read, dict) or read.get("kind") not in READ_KINDS:
        raise ValueError(f"a read of no kind this version checks: {read!r}")
    if read["kind"] == "fact":
        if read.get("call") not in FOLDED_FACTS:
            raise ValueError(f"a folded call this version does not make: {read.get('call')!r}")
        return read
    if not (isinstance(read.get("source"), str) and dynamo_sources.evaluator(read["source"])):
        raise ValueError(f"a read whose source this version cannot evaluate: {read!r}")
    if read["kind"] == "absent":
        key_of(read)  # ValueError where it is not a plain constant
    return read


# -- the index file -------------------------------------------------------------------------------


def dumps(index: Index) -> str:
    return json.dumps({"format": SERVED_FORMAT, "optimize": index.optimize, "settings": index.settings,
                       "functions": {k: {n: v for n, v in dataclasses.asdict(f).items() if n != "part"}
                                     for k, f in sorted(index.functions.items())},
                       "not_served": dict(sorted(index.not_served.items()))}, indent=1)


def parse(text: str | bytes) -> Index:
    """The index; ServedError where it is not an index of this format, with the field named."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ServedError(f"served.json does not parse: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != SERVED_FORMAT:
        raise ServedError(f"served.json is not of format {SERVED_FORMAT} (built by another hatch-precompile)")
    settings = data.get("settings")
    if not isinstance(settings, dict) or not all(isinstance(v, dict) for v in settings.values()):
        raise ServedError("served.json does not say which compiler settings its entries were compiled under")
    if not isinstance(data.get("optimize"), int):
        raise ServedError("served.json does not say the Python optimization level of the build")
    functions = {}
    for key, raw in (data.get("functions") or {}).items():
        try:
            function = Function(module=_str(raw["module"]), qualname=_str(raw["qualname"]),
                                firstlineno=int(raw["firstlineno"]), entry=_str(raw["entry"]), guards=_str(raw["guards"]),
                                options=tuple(_keywords(o) for o in raw["options"]),
                                guarded=_guarded(raw["guarded"], settings),
                                install_at=_one_of(raw.get("install_at", "compile"), INSTALL_AT),
                                made_by=_site(raw.get("made_by")), parts=_parts(raw.get("parts") or {}))
        except (KeyError, TypeError, ValueError, SyntaxError) as exc:
            raise ServedError(f"served.json: function {key!r}: {exc!r}") from None
        if source_key(function.qualname, function.firstlineno) != key:
            raise ServedError(f"served.json: function {key!r} is not keyed by its name and line")
        functions[key] = function
    not_served = data.get("not_served") or {}  # absent in an index of an older build
    if not (isinstance(not_served, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in not_served.items())):
        raise ServedError("served.json: `not_served` is not each function's name and why")
    return Index(data["optimize"], settings, functions, dict(not_served))


def _site(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not (isinstance(value, dict) and isinstance(value.get("module"), str) and isinstance(value.get("function"), str)
            and isinstance(value.get("line"), int)):
        raise TypeError(f"`made_by` {value!r} is not a call's module, function and line")
    return {"module": value["module"], "function": value["function"], "line": value["line"]}


def _parts(value: Any) -> dict[str, str]:
    if not (isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
        raise TypeError(f"`parts` {value!r} is not each class's name and its entry's path")
    return dict(value)


def _one_of(value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{value!r} is none of {', '.join(allowed)}")
    return str(value)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _keywords(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"{value!r} is not an object of keywords")
    return dict(value)


def _guarded(value: Any, settings: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("`guarded` is not an object")
    checked: dict[str, Any] = {}
    for sha, code in value.items():
        if isinstance(code, str):
            checked[_str(sha)] = code
            continue
        if not isinstance(code, dict) or not isinstance(code.get("held"), list) or not isinstance(code.get("reads"), list):
            raise TypeError(f"guarded code {sha!r} is neither what it holds and read nor a reason")
        for guard in code["held"]:
            if not (isinstance(guard, dict) and isinstance(guard.get("source"), str)
                    and dynamo_sources.evaluator(guard["source"]) and isinstance(guard.get("described"), dict)):
                raise ValueError(f"guarded code {sha!r} has a guard that is not one this version can hold: {guard!r}")
        if code.get("settings") not in settings:
            raise ValueError(f"guarded code {sha!r} names compiler settings the index does not hold")
        checked[_str(sha)] = {"held": code["held"], "reads": [_read(r) for r in code["reads"]],
                              "settings": code["settings"]}
    return checked
