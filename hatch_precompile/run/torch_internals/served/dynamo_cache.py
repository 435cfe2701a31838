"""Torch's Dynamo cache entries installed on a function's code, every guard kept (run/served/served_compile.py).

An entry (torch's ``PrecompileCacheEntry``, pickled by the build's second pass) holds Dynamo's
output for a function: the transformed bytecode of each graph and resume function, the compiled
graphs (AOTAutograd's bundled entries), and each guarded code's guards, serialized. Installed
with ``CompilePackage.install`` as torch's ``caching_precompile`` installs it, each guarded code
becomes a *precompile entry* of the function's code object: Dynamo's frame evaluation checks it
first, at every call, and runs its code where its guards hold -- nothing traced, nothing compiled.
Where they do not, Dynamo traces the call as it always does.

Torch serializes a guard manager without the guards it cannot pickle (an object's identity).
For each guarded code, the index names what was dropped (protocol/served_compiles.py), and a guard
is added that holds each such source to the object the build had there (run/served/held_objects.py), as
Dynamo's own ID guard would. A guarded code whose dropped guards cannot be held so, whose guards
the index does not know or torch rebuilt here with other values than the build's (guard_text), or
whose objects are other ones here, gets a guard that always fails: it is never run, and such a
call is traced. Its last guard, the first time all the others hold, checks what its trace read
that no guard holds and loads its compiled graphs (entry_graphs).

Torch's own flag (``torch._dynamo.config.caching_precompile``) is never set here: it would drop
those guards for every compile of the process.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import hashlib
import itertools
import logging
import re
import sys
import threading
from typing import Any, Callable, Iterator

from hatch_precompile.errors import DynamoEntryNotYet, DynamoEntryRefused
from hatch_precompile.run.served import held_objects, unguarded_reads
from hatch_precompile.run.torch_internals.registry import lookup
from hatch_precompile.run.torch_internals.served import (
    compile_controls,
    entry_graphs,
    entry_pickle,
    guard_states,
    guard_text,
    shared_code,
    thread_count,
)

log = logging.getLogger("hatch_precompile")
_lock = threading.Lock()  # one install at a time: the wrappers below are the package module's for its duration


def unsupported(torch: Any) -> str | None:
    """Why this torch cannot take a shipped entry (no precompile entries on code objects), or None."""
    lookup("precompile-entry", "call")
    frame = getattr(getattr(getattr(torch, "_C", None), "_dynamo", None), "eval_frame", None)
    if not all(hasattr(frame, n) for n in ("_load_precompile_entry", "_reset_precompile_entries")):
        return f"torch {torch.__version__} has no precompile entries (torch.compile traces as usual)"
    return None


def kept(fn: Any) -> bool:
    """Whether ``fn``'s code still holds the entries installed on it: torch 2.14's reset drops them with
    the codes it traced, where the function was one of those (2.13's keeps them)."""
    lookup("precompile-entry", "call")
    import torch

    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return code is not None and bool(torch._C._dynamo.eval_frame._debug_get_precompile_entries(code))


@dataclasses.dataclass(frozen=True)
class Shipped:
    """One function's shipped entry and what the index says of it."""

    data: bytes  # torch's pickled entry
    guarded: dict[str, Any]  # the index's record of each guarded code (by its guards' digest), or why never
    guards: dict[str, list[str]]  # each guarded code's guards as the build's trace rebuilt them, in words
    settings: dict[str, dict[str, Any]]  # the compiler settings by digest
    serving: Callable[[], bool]  # whether a call runs under the package's own compile of the function
    limits: tuple[int | None, ...] = (None,)  # the compiles' own recompile_limit (None: torch's config)
    left_to_torch: Callable[[str], None] = lambda why: None  # told why torch's controls left a call to torch
    traced_call: Callable[[str], None] = lambda why: None  # told why a call of its codes was traced all the same
    digest: str | None = None  # the sha256 of ``data``, where the manifest gave it (else hashed here)


_ahead: dict[str, dict[str, Any]] = {}  # by the entry's digest: its graphs, loaded before its install
# by the entry's digest: the entry those graphs came from and the globals each guarded code loads, for its first install
_read_ahead: dict[str, tuple[Any, dict[int, frozenset[str]]]] = {}


def ahead(data: bytes, digest: str | None = None) -> None:
    """The graphs of the entry ``data`` (torch's pickled entry) loaded now, for its install at the
    function's first call: one compile's entry (an entry of several loads each graph when first run).
    Loading reads no guard's source, so it does not wait for what the guards do (a registry filled as
    models are made). Where it fails, the install loads them, as without."""
    lookup("graph-load", "call")
    digest = digest or hashlib.sha256(data).hexdigest()
    with _lock:
        if digest in _ahead:
            return
        try:
            entry = entry_pickle.loads(data)
            codes = [c for c in entry.dynamo.codes if not getattr(c, "bypassed", False)]
            if any(len(c.guarded_codes) > 1 for c in codes):
                return
            _ahead[digest] = {name: artifact.after_deserialization() for name, artifact in entry.backends.items()}
            lookup("guard-load", "wrap")
            from torch._dynamo import package  # noqa: TID251  (the touchpoint's owner)

            # its Dynamo part untouched: the install need not read it again, nor the globals its codes load
            _read_ahead[digest] = entry, entry_graphs.globals_by_code(entry.dynamo, package.SerializedCode.to_code_object)

            with guard_states.missing_grads_as_none():
                guard_states.read_ahead((g.guards_state for c in codes for g in c.guarded_codes), package.load_guards_state)
        except Exception:
            log.debug("hatch-precompile: an entry's graphs not loaded ahead of its install", exc_info=True)


def install(fn: Any, shipped: Shipped, env_checked: bool, any_threads: bool = False,
            not_loaded: Callable[[str], None] = lambda why: None,
            refused: Callable[[str], None] = lambda why: None,
            thread_guards: list[Any] | None = None, beside_others: bool = False) -> tuple[dict[str, int], list[str]]:
    """Install the entry ``shipped`` on ``fn``'s code; what its guarded codes became (``{"served": n,
    "held": objects held to the build's, "traced": guarded codes never run}``) and why each traced
    one is. Raises DynamoEntryRefused, having left nothing installed that runs (DynamoEntryNotYet where torch
    raised while it rebuilt the guards: a source it evaluates may not be there yet, such as a key of
    a registry a library fills as its models are made).

    Each guarded code runs only where: the guards torch rebuilt here are the build's, value for
    value (guard_text); each object its dropped identity guards held is the build's
    (held_objects), at each call; the call runs under the package's own compile of ``fn``
    (``shipped.serving``), at each call; and, checked once when it is first about to run, what its
    trace read that no guard holds is as at build (unguarded_reads; ``refused`` is told why not).

    ``env_checked``: load() matched the set's environment key here (torch, Python, GPU by NVML), so
    torch's own check of the same, which asks CUDA, is not asked again. ``any_threads``: the set's
    kernels read the thread count when they run (``cpp.dynamic_threads``), so the entry's guards take
    this process's count instead of the build machine's (``thread_guards`` is given each such guard:
    ``thread_count.threads_now`` sets a later count into them). ``not_loaded`` is told why, where a guarded code's
    compiled graphs do not load at its first run (it is traced). ``beside_others``: one class's part of
    an entry split by class, installed beside the parts already on the code (shared_code)."""
    lookup("compile-package", "call")
    from torch._dynamo import package  # noqa: TID251  (the touchpoint's owner)

    unfollowed = compile_controls.watching()
    if unfollowed:  # a shipped code would run where torch's own controls would not run a compiled one
        raise DynamoEntryRefused(unfollowed)
    digest = shipped.digest or hashlib.sha256(shipped.data).hexdigest()
    try:
        with _lock:
            entry, loads = _read_ahead.pop(digest, (None, None))  # once: an install tried again reads its own
        entry = entry if entry is not None else entry_pickle.loads(shipped.data)
        dynamo, backends = entry.dynamo, entry.backends
        loads = loads if loads is not None else entry_graphs.globals_by_code(dynamo, package.SerializedCode.to_code_object)
        if env_checked:  # asking CUDA here would initialise it in the parent of fork-started workers
            dynamo.check_versions = lambda: None
        elsewhere = _codes_of_other_globals(fn, dynamo)
        one_compile = all(len(c.guarded_codes) <= 1 for c in dynamo.codes if not getattr(c, "bypassed", False))
        with _lock:
            loaded = _ahead.pop(digest, None)
        graphs = entry_graphs.Graphs(backends, not_loaded, at_install=one_compile, loaded=loaded)
        calls = graphs.called_by(dynamo, loads)
        with shared_code.beside_others(getattr(fn, "__code__", None), beside_others):
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
            key = guard_states.digest(raw)
            state = guard_states.taken(key)  # read ahead of a first-call install, or now
            state = state if state is not None else load_state(raw)
            digests[id(state)] = key
            if any_threads:
                guard = thread_count.this_process_count(state)
                if guard is not None and thread_guards is not None:
                    thread_guards.append(guard)
            return state

        def build_manager(state: Any, code: Any, scope: dict[str, Any]) -> Any:
            try:
                manager = load_manager(state, code, scope)
            except Exception as exc:  # a guard's source not there yet, or torch moved
                rebuilding.append(exc)
                raise
            digest = digests.get(id(state), "")
            record = elsewhere.get(id(code)) or shipped.guarded.get(digest, "its guards are not in the index")
            if isinstance(record, dict):
                record = _guards_differ(manager, shipped.guards.get(digest), any_threads) or record
            check, held = (None, record) if isinstance(record, str) else held_objects.held(record["held"], scope)
            if check is None:
                counts["traced"] += 1
                reasons.append(str(held))
                manager.root.add_lambda_guard(_never, ["hatch-precompile: not served (traced instead)"], None)
                return manager
            counts["served"] += 1
            counts["held"] += int(held)
            serving = shipped.serving
            # One guard: an object is held (a call's first one bound) only by calls under the package's compile.
            manager.root.add_lambda_guard(lambda frame_locals: alive and serving() and check(frame_locals),
                                          ["hatch-precompile: the call runs under the package's own compile of it (a "
                                           "compile of the same code by another caller, or a library's compile run "
                                           "from outside the package's code, is traced), and each object its trace "
                                           "held is the build's, found again by name"], None)
            assert isinstance(record, dict)
            gate = compile_controls.Gate(code, shipped.limits, shipped.left_to_torch, manager=manager,
                                         traced=shipped.traced_call)
            graphs.last_guard(manager.root, calls.get(digest, set()),
                              unguarded_reads.check(record, shipped.settings, scope), refused, gate)
            return manager

        rebuilding: list[Exception] = []  # what torch raised while it rebuilt a guarded code's guards
        alive = [True]  # emptied where the install fails beside others: its guarded codes on the code never run
        expected = sum(len(c.guarded_codes) for c in dynamo.codes if not getattr(c, "bypassed", False))
        scopes = [vars(m) for m in {sys.modules.get(getattr(c, "python_module", "")) for c in dynamo.codes} if m]
        names_before = [set(scope) for scope in scopes]
        package.load_guards_state, package.load_guard_manager = read_state, build_manager
        try:
            with shared_code.beside_others(getattr(fn, "__code__", None), beside_others), \
                    guard_states.missing_grads_as_none(), _guard_errors_unlogged():
                compile_package.install(graphs.deferred())
            if counts["served"] + counts["traced"] != expected:  # torch built guards these wrappers did not see
                raise RuntimeError(f"{expected} guarded code(s) in the entry, {counts['served'] + counts['traced']} seen")
            missing = _missing_global(dynamo, loads)
            if missing:
                raise RuntimeError(missing)
            _after_installed_names(dynamo)
        except Exception as exc:
            log.debug("hatch-precompile: an entry of %s not installed", getattr(fn, "__qualname__", fn), exc_info=True)
            alive.clear()
            if not beside_others:  # its reset would drop the other parts' entries too
                _quietly(compile_package.uninstall)
            for scope, before in zip(scopes, names_before):  # what uninstall() leaves: the builtins dict, say
                for name in set(scope) - before:
                    scope.pop(name, None)
            if rebuilding and one_compile:  # tried again at the first call: what loaded is kept for it
                _ahead[digest] = graphs.ahead()
            error = DynamoEntryNotYet if rebuilding else DynamoEntryRefused
            raise error(f"torch could not install the shipped Dynamo cache entry: {exc!r}") from None
        finally:
            package.load_guards_state, package.load_guard_manager = load_state, load_manager
    return counts, reasons


def rebuilt_guards(state: bytes, compile_package: Any) -> list[str] | None:
    """The guards torch's install rebuilds from a guarded code's serialized ``state``, rebuilt now, in
    words, for the code torch's ``compile_package`` is adding it to, over the globals the install
    gives it (the compiled function's own, for its first code, as _codes_of_other_globals names it):
    the build's second pass records them as its trace made them. None where they cannot be rebuilt."""
    lookup("guard-load", "wrap")
    from torch._dynamo import package  # noqa: TID251  (the touchpoint's owner)

    try:
        entry = compile_package._current_entry
        code = package.SerializedCode.to_code_object(entry.python_code)
        main: Any = getattr(compile_package, "_innermost_fn", None)
        main = getattr(main, "__func__", main)
        main_code = getattr(main, "__code__", None)
        own = main_code is not None and (code.co_name, code.co_firstlineno) == (main_code.co_name,
                                                                               main_code.co_firstlineno)
        scope = main.__globals__ if own else vars(sys.modules[entry.python_module])
        with guard_states.missing_grads_as_none():
            return guard_text.lines(package.load_guard_manager(package.load_guards_state(state), code, scope))
    except Exception:
        return None


def _guards_differ(manager: Any, build: list[str] | None, any_threads: bool) -> str | None:
    """Why the guards torch rebuilt here are not those the build's trace made (a value torch read
    again here through a module, a class or a function), or None where they are."""
    if build is None:
        return "the index holds no guards of it"
    here = guard_text.lines(manager)
    if here is None:
        return "its guards as torch rebuilt them here cannot be read"
    return guard_text.difference(build, here, any_threads)


def _missing_global(dynamo: Any, loads: dict[int, frozenset[str]]) -> str | None:
    """A global that a guarded code's compiled bytecode loads and that the installed entry did not
    bring, or None. Torch names some objects its bytecode rebuilds by their address in the build's
    process (``___module_collections_<id>_c12``) and does not save them with the entry: such a code
    would raise NameError at the call it serves, so the entry is refused and its calls are traced."""
    for code in dynamo.codes:
        if getattr(code, "bypassed", False):
            continue
        scope = vars(sys.modules[code.python_module])
        for guarded in code.guarded_codes:
            for name in sorted(loads.get(id(guarded), ())):
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
def _guard_errors_unlogged() -> Iterator[None]:
    """Torch logs a guard it could not rebuild as an error with its stack; an install that fails says
    why in ``served()`` instead (and one tried again at the first call may well succeed), so while an
    entry is installed those records are not printed."""
    logger = logging.getLogger(lookup("guard-create-log", "logging").module)

    def unlogged(record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR

    logger.addFilter(unlogged)
    try:
        yield
    finally:
        logger.removeFilter(unlogged)


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
