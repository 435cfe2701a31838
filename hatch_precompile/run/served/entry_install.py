"""A package's shipped Dynamo cache entry installed on its function's code, once a process: at
``torch.compile`` (run/served/served_compile.py), at the compiled object's first call, or as soon as the
function's module is imported, where the build's proof installed it so; and what became of each
(``served()``'s words).

Standard library at import; torch is the caller's.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
import threading
from typing import Any, Callable

from hatch_precompile.errors import DynamoEntryNotYet, DynamoEntryRefused, Skip
from hatch_precompile.protocol import served_compiles
from hatch_precompile.run.sets.artifacts import ArtifactSet

log = logging.getLogger("hatch_precompile")


@dataclasses.dataclass
class Package:
    found: ArtifactSet
    index: served_compiles.Index


@dataclasses.dataclass
class ProcessState:
    """What lives for the process: the packages whose calls are served, what became of each function
    (by source key: "served ..." or why not), and torch's own ``torch.compile``."""

    packages: dict[str, Package] = dataclasses.field(default_factory=dict)
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)
    tried: set[str] = dataclasses.field(default_factory=set)  # installed or refused: asked once per function
    first_call: set[str] = dataclasses.field(default_factory=set)  # installed at the first call, not before
    # installed at its module's import: what it became, until said at the package's compile (then None)
    at_import: dict[str, str | None] = dataclasses.field(default_factory=dict)
    thread_guards: dict[str, list[Any]] = dataclasses.field(default_factory=dict)  # each entry's thread-count guards
    left: dict[str, str] = dataclasses.field(default_factory=dict)  # why torch's controls last left a call to torch
    traced_calls: dict[str, tuple[int, str]] = dataclasses.field(default_factory=dict)  # calls traced anyway: how
    # many, and the first one's why
    parts: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # a function split by class: each
    # class's outcome
    # a function installed at its first call: its entry's bytes and guards' words, read (every hash checked) ahead
    read_ahead: dict[str, tuple[bytes, dict[str, list[str]]]] = dataclasses.field(default_factory=dict)
    original: Callable[..., Any] | None = None
    lock: threading.RLock = dataclasses.field(default_factory=threading.RLock)


this_process = ProcessState()


def at_imports(package: str, index: served_compiles.Index) -> None:
    """Each entry the build's proof installed at its module's import, installed so here (in the proof's
    own child, each entry is tried so); the graphs of each a library compiles on the package's behalf,
    loaded as soon as Dynamo is imported (dynamo_cache.ahead): before the library's first call, where
    the process imports Dynamo before it (transformers' models do, as they are made)."""
    from hatch_precompile.run import variables
    from hatch_precompile.run.torch_internals import import_hook

    trying = variables.try_at_import()
    by_module: dict[str, list[served_compiles.Function]] = {}
    for function in index.functions.values():
        if function.made_by is not None:  # a library's compile: installed where the library makes it, often
            # inside its own first call (generate); its graphs loaded once Dynamo is (never imported for it)
            import_hook.after_import("torch._dynamo", functools.partial(_graphs_ahead_of, package, function))
            continue
        if function.parts:  # split by class: a part is installed by a compile of a module of its class
            continue
        if function.module != package and not function.module.startswith(package + ".") \
                and function.module in sys.modules:
            continue  # a library's module imported already (torch's, for Module._call_impl): installed now,
            # inside the package's own load(), its install would import the modules its entry names
        if function.install_at == "import" or (trying and function.install_at == "compile"):
            by_module.setdefault(function.module, []).append(function)
    for module, functions in by_module.items():  # one import hook a module
        import_hook.after_import(module, functools.partial(_install_at_import, package, functions))


def threads_at_first_call(compiled: Any, name: str) -> None:
    """The thread count its entry's guards hold (a set whose kernels read it when they run), taken
    again at the first call of ``compiled``: installed at import, the entry is served to a process
    that sets its thread count after (``import pkg; torch.set_num_threads(8)``), as a trace made at
    that call would be."""
    from hatch_precompile.run.torch_internals.served import thread_count

    with this_process.lock:
        guards = this_process.thread_guards.get(name)
    if guards:
        thread_count.at_first_call(compiled, guards)


def install(package: str, model: Any, function: served_compiles.Function, compiled: Any = None) -> bool:
    """Install ``function``'s entry on ``model``'s code, once per process; whether torch installed it
    there now (its guarded codes served, or some never run and said why). Where torch cannot rebuild
    its guards yet (a source they read is not there at ``torch.compile``: a registry a library fills
    as its models are made), it is tried again once, at the first call of ``compiled``."""
    from hatch_precompile.run.torch_internals.served import (
        compile_controls,
        compile_scope,
        compiler_settings,
        dynamo_cache,
    )
    from hatch_precompile.run.torch_internals.served.stand_ins import graph_stand_in

    name = key_of(function)
    with this_process.lock:
        if name in this_process.tried:
            return False  # installed on its code already (every wrapper of it is served), or refused
        this_process.tried.add(name)
        unservable = [why for why in function.guarded.values() if isinstance(why, str)]
        if len(unservable) == len(function.guarded):  # a set built before such entries were left out
            said(function, f"traced: {unservable[0] if unservable else 'its entry holds no guarded code'}")
            return False
        index = this_process.packages[package].index
        differs = compiler_settings.none_compiled_under(
            {c["settings"]: index.settings[c["settings"]] for c in function.guarded.values() if isinstance(c, dict)},
            compiler_settings.snapshot())
        if differs:  # checked again when each guarded code first runs; here, nothing is loaded for nothing
            said(function, f"traced: {differs}")
            return False
        try:
            found = this_process.packages[package].found
            read = this_process.read_ahead.pop(name, None)
            data, guards = read if read is not None else _entry_read(found, function)
            shipped = dynamo_cache.Shipped(data, function.guarded, guards, index.settings,
                                           compile_scope.serving(served_compiles.source_key(function.qualname,
                                                                                           function.firstlineno)),
                                           tuple(o.get("recompile_limit") for o in function.options),
                                           functools.partial(_left_to_torch, function.name),
                                           functools.partial(_traced_call, function.name),
                                           found.manifest.files[function.entry].sha256)
            graph_stand_in.install()  # before the entry's graphs load
            thread_guards: list[Any] = []
            counts, reasons = dynamo_cache.install(served_compiles.innermost(model), shipped, env_checked=True,
                                                   any_threads=bool(found.manifest.settings.get("cpp.dynamic_threads")),
                                                   not_loaded=functools.partial(_not_loaded, function),
                                                   refused=functools.partial(_refused_at_first_run, function),
                                                   thread_guards=thread_guards, beside_others=bool(function.part))
        except DynamoEntryNotYet as exc:
            if compiled is not None and compile_scope.at_first_call(compiled, functools.partial(
                    again, package, model, function)):
                this_process.read_ahead[name] = data, guards  # read and checked once: the retry installs only
                said(function, f"installed at its first call: at torch.compile, {exc}")
            else:
                said(function, f"traced: {exc}")
            return False
        except (Skip, DynamoEntryRefused) as exc:
            said(function, f"traced: {exc}")
            return False
        except Exception as exc:  # torch moved: the function is traced, as without hatch-precompile
            said(function, f"traced: installing its entry failed: {exc!r}")
            return False
        if not counts["served"]:
            said(function, f"traced: {reasons[0] if reasons else 'its entry holds no guarded code'}")
            return True
        this_process.thread_guards[name] = thread_guards
        compile_controls.after_reset(functools.partial(_after_reset, function, served_compiles.innermost(model)))
        held = f", {counts['held']} object(s) held to the build's" if counts["held"] else ""
        traced = f"; {counts['traced']} other(s) traced: {reasons[0]}" if counts["traced"] else ""
        said(function, f"served: {counts['served']} guarded code(s){held}{traced}")
        return True


def _install_at_import(package: str, functions: list[served_compiles.Function], module: Any) -> None:
    """Each of ``functions`` installed right after their module is imported (``_installed_at_import``)."""
    for function in functions:
        try:
            _installed_at_import(package, function, module)
        except Exception:  # never break the user's import: torch.compile installs it, as it would have
            log.debug("hatch-precompile: %s.%s: not installed at import", function.module, function.qualname,
                      exc_info=True)


def _installed_at_import(package: str, function: served_compiles.Function, module: Any) -> None:
    """``function``'s entry installed right after its module is imported, on the function found there
    by name. What it became (served, or its guarded codes never run: a guard torch rebuilt here with
    another value than the build's) is said when the package compiles it; where torch did not install
    it (a source its guards read not there yet), nothing is said or kept, and ``torch.compile``
    installs it as it would have."""
    name = function.name
    found: Any = module
    for part in function.qualname.split("."):
        found = getattr(found, part, None)
    key = served_compiles.function_key(found) if found is not None else None
    if key is None or key[:3] != (served_compiles.source_key(function.qualname, function.firstlineno),
                                  function.module, function.qualname):
        return  # made in a call (<locals>), or the module's name now holds another function
    with this_process.lock:
        if name in this_process.tried:
            return  # compiled (and so installed or refused) while its module ran
        before = this_process.outcomes.get(name)  # a compile of it with other options, say
        installed = False
        try:
            installed = install(package, found, function)
        finally:
            outcome = this_process.outcomes.pop(name, "")
            if before is not None:
                this_process.outcomes[name] = before
            if installed:
                this_process.at_import[name] = outcome
            else:
                this_process.tried.discard(name)


def _entry_read(found: ArtifactSet, function: served_compiles.Function) -> tuple[bytes, dict[str, list[str]]]:
    """``function``'s shipped entry and its guards in words, each checked against the manifest."""
    from hatch_precompile.run.torch_internals.served import guard_text

    return found.read(function.entry), guard_text.unpacked(found.read(function.guards))


def graphs_ahead(package: str, function: served_compiles.Function) -> None:
    """The graphs of a function installed at its first call, loaded now, and all else its install reads
    that no call changes (its files, the globals its codes load, the compiler settings' snapshot,
    remembered while they stay): that call then only installs."""
    from hatch_precompile.run.torch_internals.served import compiler_settings, dynamo_cache
    from hatch_precompile.run.torch_internals.served.stand_ins import graph_stand_in

    try:
        graph_stand_in.install()
        found = this_process.packages[package].found
        read = _entry_read(found, function)
        with this_process.lock:
            this_process.read_ahead[key_of(function)] = read
        dynamo_cache.ahead(read[0], found.manifest.files[function.entry].sha256)
        compiler_settings.snapshot()
    except Exception:  # loaded at the install instead
        log.debug("hatch-precompile: %s.%s: graphs not loaded ahead", function.module, function.qualname, exc_info=True)


def _graphs_ahead_of(package: str, function: served_compiles.Function, dynamo: Any) -> None:
    graphs_ahead(package, function)


def again(package: str, model: Any, function: served_compiles.Function) -> None:
    """The install tried again, at the function's first call."""
    with this_process.lock:
        this_process.tried.discard(key_of(function))
    install(package, model, function)
    with this_process.lock:
        if _outcome(function).startswith("served"):
            this_process.first_call.add(function.name)


def _after_reset(function: served_compiles.Function, fn: Any) -> None:
    """After torch's reset: where torch dropped the entry with the codes it traced (torch 2.14), the
    function is traced from then on, and said so; where it kept it, each guarded code's first-run
    checks are made again at its next call."""
    from hatch_precompile.run.torch_internals.served import dynamo_cache

    if not dynamo_cache.kept(fn):
        _refused_at_first_run(function, "torch's reset dropped its entry, as it drops the codes it traced")


def _not_loaded(function: served_compiles.Function, why: str) -> None:
    """A guarded code's compiled graphs did not load at its first run: it is traced from then on."""
    _refused_at_first_run(function, f"a guarded code's compiled graphs did not load here ({why})")


def _refused_at_first_run(function: served_compiles.Function, why: str) -> None:
    """A guarded code was refused when first about to run: it is traced from then on, and said so
    (the first such reason of a function is the one said)."""
    with this_process.lock:
        before = _outcome(function)
    if "; at install, " not in before:
        said(function, f"traced: {why}; at install, {before}")


def install_at_first_call(package: str, model: Any, function: served_compiles.Function, compiled: Any) -> Any:
    @functools.wraps(compiled)
    def first_call(*args: Any, **kwargs: Any) -> Any:
        install(package, model, function)
        return compiled(*args, **kwargs)

    return first_call


_left_lock = threading.Lock()  # its own: told from inside a guard, which must not wait on the install's lock


def outcomes() -> dict[str, str]:
    """What became of each function's entry (``served()``): where torch's compile controls left a
    call of it to torch, the last such call's why after it."""
    with this_process.lock:
        said_of = dict(this_process.outcomes)
    with _left_lock:
        left = dict(this_process.left)
        traced = dict(this_process.traced_calls)
    found = {}
    for name, outcome in said_of.items():
        if name in traced and outcome.startswith("served"):  # an outcome of "traced: ..." says so already
            count, why = traced[name]
            outcome += f"; {count} call(s) traced here: {why}"
        found[name] = f"{outcome}; a call left to torch: {left[name]}" if name in left else outcome
    return found


def calls_traced(outcome: str) -> bool:
    """Whether ``served()``'s words for a function say that calls of it were traced all the same."""
    return " call(s) traced here: " in outcome


def _traced_call(name: str, why: str) -> None:
    """Torch traced a call of ``name`` that none of its shipped guarded codes served: counted, and the
    first one's why kept, for ``served()``."""
    with _left_lock:
        count, first = this_process.traced_calls.get(name, (0, why))
        this_process.traced_calls[name] = (count + 1, first)


def _left_to_torch(name: str, why: str) -> None:
    """Torch's compile controls left a call of ``name`` to torch (run eagerly, traced, or raising as
    torch raises): the last such call's why, for ``served()``."""
    with _left_lock:
        this_process.left[name] = why


def key_of(function: served_compiles.Function) -> str:
    """What a function's entry is installed once a process by: its name, and the class of its part."""
    return f"{function.name} [{function.part}]" if function.part else function.name


def said(function: served_compiles.Function, outcome: str) -> None:
    if not function.part:
        return said_of(function.name, outcome)
    with this_process.lock:  # a function split by class: what became of each class's part, in one line
        parts = this_process.parts.setdefault(function.name, {})
        parts[function.part] = outcome
        said_of(function.name, _in_one_line(parts))


def _in_one_line(parts: dict[str, str]) -> str:
    """Each class's outcome: traced where any class's part is (served() never says served for a call
    that traces), then those not installed yet, then those served."""
    each = sorted(parts.items())
    traced = [f"{c}: {o.removeprefix('traced: ')}" for c, o in each if o.startswith("traced")]
    waiting = [f"{c}: {o}" for c, o in each if not o.startswith(("traced", "served"))]
    served = [f"{c}: {o.removeprefix('served: ')}" for c, o in each if o.startswith("served")]
    words = "; ".join(traced + waiting)
    if not served:
        return f"traced: {words}" if traced else words
    if not words:
        return f"served: {'; '.join(served)}"
    return f"{'traced: ' if traced else ''}{words}; served: {'; '.join(served)}"


def _outcome(function: served_compiles.Function) -> str:
    """What became of ``function`` (of its part, where it is split by class); the caller holds the lock."""
    if function.part:
        return this_process.parts.get(function.name, {}).get(function.part, "")
    return this_process.outcomes.get(function.name, "")


def said_of(name: str, outcome: str) -> None:
    with this_process.lock:
        this_process.outcomes[name] = outcome
    log.debug("hatch-precompile: %s: %s", name, outcome)
