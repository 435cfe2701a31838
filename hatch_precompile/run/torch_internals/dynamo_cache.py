"""Torch's Dynamo cache entries installed on a function's code, every guard kept (run/served_compile.py).

An entry (torch's ``PrecompileCacheEntry``, pickled by the build's second pass) holds Dynamo's
output for a function: the transformed bytecode of each graph and resume function, the compiled
graphs (AOTAutograd's bundled entries), and each guarded code's guards, serialized. Installed
with ``CompilePackage.install`` as torch's ``caching_precompile`` installs it, each guarded code
becomes a *precompile entry* of the function's code object: Dynamo's frame evaluation checks it
first, at every call, and runs its code where its guards hold -- nothing traced, nothing compiled.
Where they do not, Dynamo traces the call as it always does.

Torch serializes a guard manager without the guards it cannot pickle (an object's identity).
For each guarded code, the index names what was dropped (protocol/served_compiles.py), and a guard
is added that holds each such source to the object the build had there (run/held_objects.py), as
Dynamo's own ID guard would. A guarded code whose dropped guards cannot be held so, whose guards
the index does not know, or whose objects are other ones here, gets a guard that always fails: it
is never run, and such a call is traced. Its compiled graphs are loaded by its last guard, the
first time all the others hold (_Graphs).

Torch's own flag (``torch._dynamo.config.caching_precompile``) is never set here: it would drop
those guards for every compile of the process.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import hashlib
import itertools
import pickle
import re
import sys
import threading
import types
from typing import Any, Callable, Iterator

from hatch_precompile.errors import DynamoEntryRefused
from hatch_precompile.run import held_objects
from hatch_precompile.run.torch_internals.registry import lookup

_lock = threading.Lock()  # one install at a time: the wrappers below are the package module's for its duration


def unsupported(torch: Any) -> str | None:
    """Why this torch cannot take a shipped entry (no precompile entries on code objects), or None."""
    lookup("precompile-entry", "call")
    frame = getattr(getattr(getattr(torch, "_C", None), "_dynamo", None), "eval_frame", None)
    if not all(hasattr(frame, n) for n in ("_load_precompile_entry", "_reset_precompile_entries")):
        return f"torch {torch.__version__} has no precompile entries (torch.compile traces as usual)"
    return None


def settings_digest() -> str | None:
    """A digest of the compiler settings an entry's graphs were compiled under, as torch's cache keys
    read them (Inductor's and AOTAutograd's configs, portable form); None where they cannot be read.
    A shipped entry is installed only where the build's is this process's: no guard of Dynamo's
    checks them (a process with ``TORCHINDUCTOR_MAX_AUTOTUNE=1`` is traced and compiles its own)."""
    lookup("compiler-settings", "read")
    import hashlib
    import json

    try:
        from torch._functorch import config as functorch_config  # noqa: TID251
        from torch._inductor import config as inductor_config  # noqa: TID251

        found = {"inductor": inductor_config.save_config_portable(),
                 "functorch": functorch_config.save_config_portable()}
        return hashlib.sha256(json.dumps(found, sort_keys=True, default=repr).encode()).hexdigest()
    except Exception:
        return None


def install(fn: Any, data: bytes, guarded: dict[str, Any], env_checked: bool, any_threads: bool = False,
            not_loaded: Callable[[str], None] = lambda why: None) -> tuple[dict[str, int], list[str]]:
    """Install the entry ``data`` on ``fn``'s code; what its guarded codes became (``{"served": n,
    "held": objects held to the build's, "traced": guarded codes never run}``) and why each traced
    one is. Raises DynamoEntryRefused, having left
    nothing installed. ``env_checked``: load() matched the set's environment key here (torch,
    Python, GPU by NVML), so torch's own check of the same, which asks CUDA, is not asked again.
    ``any_threads``: the set's kernels read the thread count when they run (``cpp.dynamic_threads``),
    so the entry's guards take this process's count instead of the build machine's. ``not_loaded``
    is told why, where a guarded code's compiled graphs do not load at its first call (it is traced).

    An entry of several compiles (model sizes, train() and eval()) has its graphs loaded by each
    guarded code when its guards first hold (_Graphs), not all here as torch's install loads them:
    a process that only runs inference does not load the training graphs, or another model size's.
    One compile's entry is loaded here, so that its first call runs at once."""
    lookup("compile-package", "call")
    from torch._dynamo import package  # noqa: TID251  (the touchpoint's owner)

    try:
        entry = pickle.loads(data)
        dynamo, backends = entry.dynamo, entry.backends
        if env_checked:  # asking CUDA here would initialise it in the parent of fork-started workers
            dynamo.check_versions = lambda: None
        elsewhere = _codes_of_other_globals(fn, dynamo)
        # One compile's entry (each code one guarded code) runs all its graphs at the first call:
        # loaded now, as torch does, so that call runs at once. An entry of several compiles (model
        # sizes, train() and eval()) loads each guarded code's at its first run.
        one_compile = all(len(c.guarded_codes) <= 1 for c in dynamo.codes if not getattr(c, "bypassed", False))
        graphs = _Graphs(backends, not_loaded, at_install=one_compile)
        calls = graphs.called_by(dynamo, package.SerializedCode.to_code_object)
        compile_package = package.CompilePackage(fn, dynamo)
    except Exception as exc:  # another torch's entry, the package's source changed, torch moved
        raise DynamoEntryRefused(f"torch does not take the shipped Dynamo cache entry: {exc!r}") from None
    counts = {"served": 0, "held": 0, "traced": 0}
    reasons: list[str] = []
    with _lock:
        lookup("guard-load", "wrap")
        load_state, load_manager = package.load_guards_state, package.load_guard_manager
        digests: dict[int, str] = {}

        def read_state(raw: bytes) -> Any:
            state = load_state(raw)
            digests[id(state)] = hashlib.sha256(raw).hexdigest()
            if any_threads:
                _this_thread_count(state)
            return state

        def build_manager(state: Any, code: Any, scope: dict[str, Any]) -> Any:
            manager = load_manager(state, code, scope)
            dropped = guarded.get(digests.get(id(state), ""), "its guards are not in the index")
            if id(code) in elsewhere:  # torch's guards would read one module's globals, the code another's
                dropped = elsewhere[id(code)]
            check, held = held_objects.held(dropped, scope) if isinstance(dropped, list) else (None, dropped)
            if check is None:
                counts["traced"] += 1
                reasons.append(str(held))
                manager.root.add_lambda_guard(_never, ["hatch-precompile: not served (traced instead)"], None)
            else:
                counts["served"] += 1
                counts["held"] += int(held)
                manager.root.add_lambda_guard(check, ["hatch-precompile: objects found again by name"], None)
                graphs.load_when_run(manager.root, calls.get(digests.get(id(state), ""), set()))
            return manager

        expected = sum(len(c.guarded_codes) for c in dynamo.codes if not getattr(c, "bypassed", False))
        scopes = [vars(m) for m in {sys.modules.get(getattr(c, "python_module", "")) for c in dynamo.codes} if m]
        names_before = [set(scope) for scope in scopes]
        package.load_guards_state, package.load_guard_manager = read_state, build_manager
        try:
            with _missing_grads_as_none():
                compile_package.install(graphs.deferred())
            if counts["served"] + counts["traced"] != expected:  # torch built guards these wrappers did not see
                raise RuntimeError(f"{expected} guarded code(s) in the entry, {counts['served'] + counts['traced']} seen")
            missing = _missing_global(dynamo, package.SerializedCode.to_code_object)
            if missing:
                raise RuntimeError(missing)
            _after_installed_names(dynamo)
        except Exception as exc:
            _quietly(compile_package.uninstall)
            for scope, before in zip(scopes, names_before):  # what uninstall() leaves: the builtins dict, say
                for name in set(scope) - before:
                    scope.pop(name, None)
            raise DynamoEntryRefused(f"torch could not install the shipped Dynamo cache entry: {exc!r}") from None
        finally:
            package.load_guards_state, package.load_guard_manager = load_state, load_manager
    return counts, reasons


class _Graphs:
    """An entry's compiled graphs (torch's backend artifacts, by the global name its bytecode calls
    them by), each loaded once: at install for one compile's entry; else by the last guard of the
    first guarded code that calls it, once all its other guards hold, so that where loading fails
    the call is traced, never broken. Torch's install gets stand-ins (``deferred``) that call the
    loaded graph."""

    def __init__(self, artifacts: dict[str, Any], not_loaded: Callable[[str], None], at_install: bool = False) -> None:
        self._artifacts = artifacts
        self._at_install = at_install
        self._loaded: dict[str, Any] = {}
        self._lock = threading.RLock()  # two threads' first calls load a graph once
        self._not_loaded = not_loaded

    def called_by(self, dynamo: Any, to_code: Callable[[Any], Any]) -> dict[str, set[str]]:
        """The graphs each guarded code's bytecode calls, by the digest of its guards' state."""
        calls: dict[str, set[str]] = {}
        for code in dynamo.codes:
            for guarded in [] if getattr(code, "bypassed", False) else code.guarded_codes:
                digest = hashlib.sha256(guarded.guards_state).hexdigest()
                names = set(_globals_loaded(to_code(guarded.dynamo_code)))
                calls.setdefault(digest, set()).update(names & set(self._artifacts))
        return calls

    def deferred(self) -> dict[str, Any]:
        """What torch's install takes: one compile's artifacts themselves (torch loads them, and its
        graphs are called with nothing between), else stand-ins."""
        if self._at_install:
            return self._artifacts
        return {name: _Deferred(self, name) for name in self._artifacts}

    def loaded(self, name: str) -> Any:
        graph = self._loaded.get(name)
        if graph is None:
            with self._lock:
                if name not in self._loaded:
                    lookup("graph-load", "call")
                    self._loaded[name] = self._artifacts[name].after_deserialization()
                graph = self._loaded[name]
        return graph

    def load_when_run(self, root: Any, names: set[str]) -> None:
        """The guard that loads ``names`` once the guarded code's other guards hold. One compile's
        entry is loaded by torch's install; a torch whose guard manager has no epilogue guards gets
        them loaded now. Either way a failure refuses the entry, as in torch's install."""
        if self._at_install:  # torch's install loads them
            return
        add_last = getattr(root, "add_epilogue_lambda_guard", None)
        if add_last is None:
            for name in sorted(names):
                self.loaded(name)
            return
        failed: list[str] = []

        def graphs_loaded(frame_locals: Any) -> bool:
            if failed:
                return False
            try:
                for name in sorted(names):
                    self.loaded(name)
                return True
            except Exception as exc:  # another torch's graphs, a kernel that does not load here
                failed.append(repr(exc))
                self._not_loaded(failed[0])
                return False

        add_last(graphs_loaded, ["hatch-precompile: its compiled graphs loaded"], None)


class _Deferred:
    """What torch's install takes for a backend artifact: its ``after_deserialization`` gives a
    function that calls the graph, loading it first where no guard has (it always has, here)."""

    def __init__(self, graphs: _Graphs, name: str) -> None:
        self._graphs, self._name = graphs, name

    def after_deserialization(self) -> Callable[..., Any]:
        loaded, name = self._graphs.loaded, self._name

        def compiled_graph(*args: Any, **kwargs: Any) -> Any:
            return loaded(name)(*args, **kwargs)

        return compiled_graph


def _globals_loaded(compiled: Any) -> Iterator[str]:
    """Each global name a compiled code (its nested codes too) loads."""
    pending = [compiled]
    while pending:
        code = pending.pop()
        pending += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        for instruction in dis.get_instructions(code):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(instruction.argval, str):
                yield instruction.argval


def _missing_global(dynamo: Any, to_code: Callable[[Any], Any]) -> str | None:
    """A global that a guarded code's compiled bytecode loads and that the installed entry did not
    bring, or None. Torch names some objects its bytecode rebuilds by their address in the build's
    process (``___module_collections_<id>_c12``) and does not save them with the entry: such a code
    would raise NameError at the call it serves, so the entry is refused and its calls are traced."""
    for code in dynamo.codes:
        if getattr(code, "bypassed", False):
            continue
        scope = vars(sys.modules[code.python_module])
        for guarded in code.guarded_codes:
            for name in _globals_loaded(to_code(guarded.dynamo_code)):
                if _dynamos(name) and name not in scope and not hasattr(builtins, name):
                    return f"its compiled code loads {name!r}, which the entry does not bring (torch's)"
    return None


def _dynamos(name: str) -> bool:
    """Whether a global is one Dynamo made (``__compiled_fn_1``, ``__resume_at_12_3``, ``__import_torch``,
    ``___module_collections_<id>_c12``), not the function's own: a package's function compiled at
    import may load a global its module defines after that line."""
    return name.startswith("__") and not name.endswith("__")


def _codes_of_other_globals(fn: Any, dynamo: Any) -> dict[int, str]:
    """Torch installs an entry's code into the module its entry names, and builds its guards over
    that module's globals; a decorator's wrapper (``functools.wraps``: transformers' ``forward``)
    names the module of the function it wraps, and runs with its own module's globals. The entry's
    first code (the compiled function's own) is named by its globals' module instead, so that its
    guards read, and its compiled graphs are installed into, the globals it runs with. Returns the
    codes (by id) whose globals are still another module's than the one torch would use, and why:
    their guarded codes are never run (traced)."""
    func = getattr(fn, "__func__", fn)
    main, *others = dynamo.codes
    elsewhere: dict[int, str] = {}
    name = getattr(func, "__globals__", {}).get("__name__")
    if isinstance(name, str) and getattr(sys.modules.get(name), "__dict__", None) is func.__globals__:
        main.python_module = name
    else:
        elsewhere[id(func.__code__)] = "its code runs with globals that are no module's"
    for code in others:
        if code.install_to_global or not code.code_source:  # a resume function: made over that module's globals
            continue
        try:
            found: Any = sys.modules[code.python_module]
            path = code.function_names[0].split(".") + code.code_source.split(".")
            for part in path[:-1]:
                name, _, index = part.partition("[")
                found = getattr(found, name)
                if index:
                    found = found[int(index.rstrip("]"))]
            if path[-1] != "__code__" or found.__globals__ is not vars(sys.modules[code.python_module]):
                elsewhere[id(found.__code__)] = (f"its code {code.function_names[0]}.{code.code_source} runs with "
                                                 "another module's globals than the one its entry names")
        except Exception:  # torch finds it or refuses the entry: either way nothing runs over wrong globals
            continue
    return elsewhere


@contextlib.contextmanager
def _missing_grads_as_none() -> Iterator[None]:
    """Torch pickles a parameter that had a ``.grad`` when it compiled with that grad as "missing",
    and its own unpickler then raises (torch 2.13, 2.14: a module compiled after a training step);
    the grad is no part of any guard, so it is read back as none while an entry is installed."""
    lookup("guard-state-tensor", "wrap")
    import torch
    from torch._dynamo import guards  # noqa: TID251

    pickler = guards.GuardsStatePickler
    original = pickler.__dict__["_unpickle_tensor"]
    unpickle = original.__func__

    def _unpickle_tensor(cls: Any, meta: Any, device: Any, pytype: Any, keys: Any, grad: Any) -> Any:
        return unpickle(cls, meta, device, pytype, keys, grad if grad is None or isinstance(grad, torch.Tensor) else None)

    pickler._unpickle_tensor = classmethod(_unpickle_tensor)
    try:
        yield
    finally:
        pickler._unpickle_tensor = original


def _this_thread_count(state: Any) -> None:
    """The guarded code's global-state guard holds the thread count its build ran with (torch's
    ``GlobalStateGuard``); where the kernels read it at run time, it holds this process's instead,
    so an 8-core machine is served what a 2-core one built. Left as it is where it cannot be read."""
    lookup("global-state", "setting")
    import json

    import torch

    try:
        guard = state.output_graph.global_state_guard
        fields = json.loads(guard.__getstate__())
        if not isinstance(fields, dict) or "num_threads" not in fields:
            return
        fields["num_threads"] = torch.get_num_threads()
        replaced = type(guard)()
        replaced.__setstate__(json.dumps(fields))
        state.output_graph.global_state_guard = replaced
    except Exception:  # served where the thread count is the build's; traced elsewhere
        return


def _never(frame_locals: Any) -> bool:
    return False


def _after_installed_names(dynamo: Any) -> None:
    """Dynamo names the globals it installs with one counter (``__builtins_dict___0``,
    ``__compiled_fn_1_...``); the entry brought globals of those names from the build's process,
    so the counter moves past them: a later trace of the same module would otherwise make a name
    the entry holds, and fail (torch does not do this itself)."""
    lookup("unique-id", "setting")
    from torch._dynamo import bytecode_transformation  # noqa: TID251

    numbers = []
    for code in getattr(dynamo, "codes", []):
        module = sys.modules.get(getattr(code, "python_module", ""))
        for name in vars(module) if module is not None else ():
            if name.startswith("__"):
                numbers += [int(n) for n in re.findall(r"_(\d+)(?=_|$)", name)]
    if numbers:
        counter = bytecode_transformation._unique_id_counter
        bytecode_transformation._unique_id_counter = itertools.count(max(next(counter), max(numbers) + 1))


def _quietly(call: Callable[[], Any]) -> None:
    try:
        call()
    except Exception:
        pass
