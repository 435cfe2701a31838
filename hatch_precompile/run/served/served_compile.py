"""The package's own ``torch.compile`` calls served without Dynamo tracing them.

For a set that ships Dynamo cache entries (``dynamo/served.json``, protocol/served_compiles.py),
``load()`` calls ``intercept``: from then on, ``torch.compile`` called by the package's own code
(its caller is one of the package's modules) on a function or module its build compiled, with the
options the build used, returns what torch returns, and that function's entry is installed on its
code (run/torch_internals/served/dynamo_cache.py) -- so its first call runs the shipped graphs without
tracing, every guard checked. Every other call of ``torch.compile`` is torch's, untouched: another
package's, a function the build did not compile, other options; torch's ``caching_precompile``
flag is never set. Where an entry cannot be installed, the function is compiled as without it
(traced, its graphs warm from the shipped caches), and ``served()`` says why.

Where the build's proof installed an entry as soon as its function's module was imported (a
module the package compiles at its first use: torchvision's, timm's), a user's process does so too,
so that the first step runs installed; the entry serves only once the package compiles the function.
Where the set is for a GPU and CUDA is not yet initialised, a function's entry is installed at its
first call instead (installing loads its kernels, which would initialise CUDA in a process that
may fork workers); a module compiled so is traced.

Standard library at import; torch is the caller's.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
import threading
from typing import Any, Callable

from hatch_precompile.errors import DynamoEntryNotYet, DynamoEntryRefused, ServedError, Skip
from hatch_precompile.protocol import served_compiles
from hatch_precompile.protocol.names import SERVED_FILE
from hatch_precompile.run.sets.artifacts import ArtifactSet

log = logging.getLogger("hatch_precompile")


@dataclasses.dataclass
class _Package:
    found: ArtifactSet
    index: served_compiles.Index


@dataclasses.dataclass
class ProcessState:
    """What lives for the process: the packages whose calls are served, what became of each function
    (by source key: "served ..." or why not), and torch's own ``torch.compile``."""

    packages: dict[str, _Package] = dataclasses.field(default_factory=dict)
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)
    tried: set[str] = dataclasses.field(default_factory=set)  # installed or refused: asked once per function
    first_call: set[str] = dataclasses.field(default_factory=set)  # installed at the first call, not before
    # installed at its module's import: what it became, until said at the package's compile (then None)
    at_import: dict[str, str | None] = dataclasses.field(default_factory=dict)
    thread_guards: dict[str, list[Any]] = dataclasses.field(default_factory=dict)  # each entry's thread-count guards
    original: Callable[..., Any] | None = None
    lock: threading.RLock = dataclasses.field(default_factory=threading.RLock)


this_process = ProcessState()


def intercept(package: str, found: ArtifactSet, torch: Any) -> str | None:
    """Serve ``package``'s ``torch.compile`` calls from ``found``'s entries; why not (a note), or None."""
    from hatch_precompile.run.torch_internals import patching
    from hatch_precompile.run.torch_internals.served import dynamo_cache

    if not patching.enabled():
        return None  # HATCH_PRECOMPILE_NO_PATCHES: torch untouched
    unsupported = dynamo_cache.unsupported(torch)
    if unsupported:
        return unsupported
    try:
        index = served_compiles.parse(found.read(SERVED_FILE))
    except (Skip, ServedError) as exc:
        return f"its compiled functions are traced: {exc}"
    if index.optimize != served_compiles.optimization():  # python -O strips asserts from the bytecode
        return (f"its compiled functions are traced: this process runs Python at optimization level "
                f"{served_compiles.optimization()} (-O), its build's trace read bytecode of level {index.optimize}")
    with this_process.lock:
        this_process.packages[package] = _Package(found, index)
        if this_process.original is None:
            this_process.original = torch.compile
            torch.compile = _compile_wrapper(torch.compile)
    if not found.manifest.env.get("gpu"):  # a GPU set's install would initialise CUDA at import
        _at_imports(package, index)
    return None


def _at_imports(package: str, index: served_compiles.Index) -> None:
    """Each entry the build's proof installed at its module's import, installed so here (in the proof's
    own child, each entry is tried so)."""
    from hatch_precompile.run import variables
    from hatch_precompile.run.torch_internals import import_hook

    trying = variables.try_at_import()
    by_module: dict[str, list[served_compiles.Function]] = {}
    for function in index.functions.values():
        if function.install_at == "import" or (trying and function.install_at == "compile"):
            by_module.setdefault(function.module, []).append(function)
    for module, functions in by_module.items():  # one import hook a module
        import_hook.after_import(module, functools.partial(_install_at_import, package, functions))


def served() -> dict[str, str]:
    """Each compiled function this process asked for, ``module.qualname`` -> what became of its entry."""
    with this_process.lock:
        return dict(this_process.outcomes)


def installed_at_first_call() -> list[str]:
    """Each function whose entry torch could not install at ``torch.compile`` and did at its first call
    (the build's proof records them: a user's process then does not try before)."""
    with this_process.lock:
        return sorted(this_process.first_call)


def installed_at_import() -> list[str]:
    """Each function whose entry was installed as soon as its module was imported, before the package
    compiled it."""
    with this_process.lock:
        return sorted(this_process.at_import)


def compile_for(package: str, fn: Any, **options: Any) -> Any:
    """``torch.compile(fn, **options)`` on ``package``'s behalf (a step's fallback): served as the
    package's own call would be."""
    import torch

    original = this_process.original or torch.compile
    if package not in this_process.packages:
        return original(fn, **options)
    return _served(package, fn, options, original)


def _compile_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def compile(model: Any = None, **options: Any) -> Any:
        package = _package_of(sys._getframe(1).f_globals.get("__name__"))
        if model is None:  # @torch.compile(...): the decorator, its caller's as the call it makes
            return lambda fn: original(fn, **options) if package is None else _served(package, fn, options, original)
        if package is None:
            return original(model, **options)
        return _served(package, model, options, original)

    return compile


def _compiled(original: Callable[..., Any], model: Any, options: dict[str, Any]) -> Any:
    """``original(model, **options)``, without its compiler config, which imports Inductor's whole
    compiler (~1 s; nothing a served call runs needs it): the compiled object's public
    ``get_compiler_config()`` makes it when asked; and without the minifier's imports (its wrapper
    of the backend made by a stand-in, torch's made when Dynamo first compiles a graph)."""
    from hatch_precompile.run.torch_internals.served import compiler_config
    from hatch_precompile.run.torch_internals.served.stand_ins import debug_wrapper

    with compiler_config.deferred() as backends, debug_wrapper.deferred():
        compiled = original(model, **options)
    if backends:
        compiler_config.answer_later(compiled, backends[0])
    return compiled


def _package_of(module: Any) -> str | None:
    if not isinstance(module, str):
        return None
    with this_process.lock:
        return next((p for p in this_process.packages if module == p or module.startswith(p + ".")), None)


def _served(package: str, model: Any, options: dict[str, Any], original: Callable[..., Any]) -> Any:
    """``original(model, **options)``, with the shipped entry of ``model`` installed (now, or at its
    first call) where one was shipped for this call."""
    try:
        function = _shipped(package, model, options)
    except Exception:  # never break a torch.compile call
        log.debug("hatch-precompile: not serving %r", model, exc_info=True)
        function = None
    if function is None:
        return original(model, **options)
    compiled = _compiled(original, model, options)
    from hatch_precompile.run.torch_internals.served import compile_scope

    if not compile_scope.mark(compiled, served_compiles.source_key(function.qualname, function.firstlineno)):
        _said(function, "traced: which torch.compile a call of it runs under cannot be told (torch moved)")
        return compiled
    import torch

    if this_process.packages[package].found.manifest.env.get("gpu") and not torch.cuda.is_initialized():
        if not callable(compiled) or isinstance(model, torch.nn.Module):
            _said(function, "traced: a module compiled before CUDA was initialised is not served")
            return compiled
        return _installed_at_first_call(package, model, function, compiled)
    name = f"{function.module}.{function.qualname}"
    with this_process.lock:
        outcome = this_process.at_import.get(name)
        if outcome is not None:  # installed at its module's import: asked for now (once: a refusal at a
            this_process.at_import[name] = None  # first run is said over it, and stays)
            _said(function, outcome)
            _threads_at_first_call(compiled, name)
            return compiled
    if function.install_at == "first-call" and compile_scope.at_first_call(compiled, functools.partial(
            _again, package, model, function, name)):
        _said(function, "installed at its first call, where the build's proof installed it")
        _graphs_ahead(package, function)
        return compiled
    if _install(package, model, function, compiled):
        _threads_at_first_call(compiled, name)
    return compiled


def _threads_at_first_call(compiled: Any, name: str) -> None:
    """The thread count its entry's guards hold (a set whose kernels read it when they run), taken
    again at the first call of ``compiled``: installed at import, the entry is served to a process
    that sets its thread count after (``import pkg; torch.set_num_threads(8)``), as a trace made at
    that call would be."""
    from hatch_precompile.run.torch_internals.served import thread_count

    with this_process.lock:
        guards = this_process.thread_guards.get(name)
    if guards:
        thread_count.at_first_call(compiled, guards)


def _shipped(package: str, model: Any, options: dict[str, Any]) -> served_compiles.Function | None:
    """The shipped function for this call, or None (said in ``served()`` where one was shipped)."""
    found = served_compiles.function_key(model)
    if found is None:
        return None
    key, module, qualname, _ = found
    with this_process.lock:
        function = this_process.packages[package].index.functions.get(key)
    if function is None or (function.module, function.qualname) != (module, qualname):
        return None
    if not served_compiles.takes(function, options):
        _said(function, "traced: compiled with other options than the build's")
        return None
    return function


def _install(package: str, model: Any, function: served_compiles.Function, compiled: Any = None) -> bool:
    """Install ``function``'s entry on ``model``'s code, once per process; whether torch installed it
    there now (its guarded codes served, or some never run and said why). Where torch cannot rebuild
    its guards yet (a source they read is not there at ``torch.compile``: a registry a library fills
    as its models are made), it is tried again once, at the first call of ``compiled``."""
    from hatch_precompile.run.torch_internals.served import compile_scope, compiler_settings, dynamo_cache, guard_text
    from hatch_precompile.run.torch_internals.served.stand_ins import graph_stand_in

    name = f"{function.module}.{function.qualname}"
    with this_process.lock:
        if name in this_process.tried:
            return False  # installed on its code already (every wrapper of it is served), or refused
        this_process.tried.add(name)
        unservable = [why for why in function.guarded.values() if isinstance(why, str)]
        if len(unservable) == len(function.guarded):  # a set built before such entries were left out
            _said(function, f"traced: {unservable[0] if unservable else 'its entry holds no guarded code'}")
            return False
        index = this_process.packages[package].index
        differs = compiler_settings.none_compiled_under(
            {c["settings"]: index.settings[c["settings"]] for c in function.guarded.values() if isinstance(c, dict)},
            compiler_settings.snapshot())
        if differs:  # checked again when each guarded code first runs; here, nothing is loaded for nothing
            _said(function, f"traced: {differs}")
            return False
        try:
            found = this_process.packages[package].found
            shipped = dynamo_cache.Shipped(found.read(function.entry), function.guarded,
                                           guard_text.unpacked(found.read(function.guards)), index.settings,
                                           compile_scope.serving(served_compiles.source_key(function.qualname,
                                                                                           function.firstlineno)))
            graph_stand_in.install()  # before the entry's graphs load
            thread_guards: list[Any] = []
            counts, reasons = dynamo_cache.install(served_compiles.innermost(model), shipped, env_checked=True,
                                                   any_threads=bool(found.manifest.settings.get("cpp.dynamic_threads")),
                                                   not_loaded=functools.partial(_not_loaded, function),
                                                   refused=functools.partial(_refused_at_first_run, function),
                                                   thread_guards=thread_guards)
        except DynamoEntryNotYet as exc:
            if compiled is not None and compile_scope.at_first_call(compiled, functools.partial(
                    _again, package, model, function, name)):
                _said(function, f"installed at its first call: at torch.compile, {exc}")
            else:
                _said(function, f"traced: {exc}")
            return False
        except (Skip, DynamoEntryRefused) as exc:
            _said(function, f"traced: {exc}")
            return False
        except Exception as exc:  # torch moved: the function is traced, as without hatch-precompile
            _said(function, f"traced: installing its entry failed: {exc!r}")
            return False
        if not counts["served"]:
            _said(function, f"traced: {reasons[0] if reasons else 'its entry holds no guarded code'}")
            return True
        this_process.thread_guards[name] = thread_guards
        held = f", {counts['held']} object(s) held to the build's" if counts["held"] else ""
        traced = f"; {counts['traced']} other(s) traced: {reasons[0]}" if counts["traced"] else ""
        _said(function, f"served: {counts['served']} guarded code(s){held}{traced}")
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
    name = f"{function.module}.{function.qualname}"
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
            installed = _install(package, found, function)
        finally:
            outcome = this_process.outcomes.pop(name, "")
            if before is not None:
                this_process.outcomes[name] = before
            if installed:
                this_process.at_import[name] = outcome
            else:
                this_process.tried.discard(name)


def _graphs_ahead(package: str, function: served_compiles.Function) -> None:
    """The graphs of a function installed at its first call, loaded now: that call then only installs."""
    from hatch_precompile.run.torch_internals.served import dynamo_cache
    from hatch_precompile.run.torch_internals.served.stand_ins import graph_stand_in

    try:
        graph_stand_in.install()
        dynamo_cache.ahead(this_process.packages[package].found.read(function.entry))
    except Exception:  # loaded at the install instead
        log.debug("hatch-precompile: %s.%s: graphs not loaded ahead", function.module, function.qualname, exc_info=True)


def _again(package: str, model: Any, function: served_compiles.Function, name: str) -> None:
    """The install tried again, at the function's first call."""
    with this_process.lock:
        this_process.tried.discard(name)
    _install(package, model, function)
    with this_process.lock:
        if this_process.outcomes.get(name, "").startswith("served"):
            this_process.first_call.add(name)


def _not_loaded(function: served_compiles.Function, why: str) -> None:
    """A guarded code's compiled graphs did not load at its first run: it is traced from then on."""
    _refused_at_first_run(function, f"a guarded code's compiled graphs did not load here ({why})")


def _refused_at_first_run(function: served_compiles.Function, why: str) -> None:
    """A guarded code was refused when first about to run: it is traced from then on, and said so
    (the first such reason of a function is the one said)."""
    with this_process.lock:
        before = this_process.outcomes.get(f"{function.module}.{function.qualname}", "")
    if "; at install, " not in before:
        _said(function, f"traced: {why}; at install, {before}")


def _installed_at_first_call(package: str, model: Any, function: served_compiles.Function, compiled: Any) -> Any:
    @functools.wraps(compiled)
    def first_call(*args: Any, **kwargs: Any) -> Any:
        _install(package, model, function)
        return compiled(*args, **kwargs)

    return first_call


def _said(function: served_compiles.Function, outcome: str) -> None:
    with this_process.lock:
        this_process.outcomes[f"{function.module}.{function.qualname}"] = outcome
    log.debug("hatch-precompile: %s.%s: %s", function.module, function.qualname, outcome)
