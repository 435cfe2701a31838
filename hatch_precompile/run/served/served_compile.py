"""The package's own ``torch.compile`` calls served without Dynamo tracing them.

For a set that ships Dynamo cache entries (``dynamo/served.json``, protocol/served_compiles.py),
``load()`` calls ``intercept``: from then on, ``torch.compile`` called by the package's own code
(its caller is one of the package's modules) on a function or module its build compiled, with the
options the build used, returns what torch returns, and that function's entry is installed on its
code (run/served/entry_install.py, over run/torch_internals/served/dynamo_cache.py) -- so its first
call runs the shipped graphs without tracing, every guard checked, and torch's compile controls
obeyed as by a code torch traced (run/torch_internals/served/compile_controls.py). Every other call
of ``torch.compile`` is torch's, untouched: another package's, a function the build did not
compile, other options; torch's ``caching_precompile`` flag is never set. Where an entry cannot be
installed, the function is compiled as without it (traced, its graphs warm from the shipped
caches), and ``served()`` says why.

Where the set is for a GPU and CUDA is not yet initialised, a function's entry is installed at its
first call instead (installing loads its kernels, which would initialise CUDA in a process that
may fork workers); a module compiled so is traced.

Standard library at import; torch is the caller's.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any, Callable

from hatch_precompile.errors import ServedError, Skip
from hatch_precompile.protocol import served_compiles
from hatch_precompile.protocol.names import SERVED_FILE
from hatch_precompile.run.served import dependency_compiles, entry_install
from hatch_precompile.run.sets.artifacts import ArtifactSet

log = logging.getLogger("hatch_precompile")


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
    from hatch_precompile.run.torch_internals.served import compile_controls

    compile_controls.watch()  # torch's resets and recompile counts, from its Dynamo's import on
    with entry_install.this_process.lock:
        entry_install.this_process.packages[package] = entry_install.Package(found, index)
        if entry_install.this_process.original is None:
            entry_install.this_process.original = torch.compile
            torch.compile = _compile_wrapper(torch.compile)
    if not found.manifest.env.get("gpu"):  # a GPU set's install would initialise CUDA at import
        entry_install.at_imports(package, index)
    return None


def served() -> dict[str, str]:
    """Each compiled function this process asked for, ``module.qualname`` -> what became of its entry
    (and, where torch's compile controls left a call of it to torch, the last such call's why)."""
    return entry_install.outcomes()


def installed_at_first_call() -> list[str]:
    """Each function whose entry torch could not install at ``torch.compile`` and did at its first call
    (the build's proof records them: a user's process then does not try before)."""
    with entry_install.this_process.lock:
        return sorted(entry_install.this_process.first_call)


def installed_at_import() -> list[str]:
    """Each function whose entry was installed as soon as its module was imported, before the package
    compiled it."""
    with entry_install.this_process.lock:
        return sorted(entry_install.this_process.at_import)


def compile_for(package: str, fn: Any, **options: Any) -> Any:
    """``torch.compile(fn, **options)`` on ``package``'s behalf (a step's fallback): served as the
    package's own call would be."""
    import torch

    original = entry_install.this_process.original or torch.compile
    if package not in entry_install.this_process.packages:
        return original(fn, **options)
    return _served(package, fn, options, original)


def _compile_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def compile(model: Any = None, **options: Any) -> Any:
        made_in = sys._getframe(1)
        caller = served_compiles.caller(made_in)  # model.compile(): its caller's call
        package = _package_of(caller.f_globals.get("__name__"))
        if package is None and caller is not made_in:
            # A library's module.compile() while the package's code runs (diffusers' compile_repeated_blocks,
            # called by the package): the module is compiled for every later call of it, as the package asked.
            package = _package_on_stack(caller)
        at = None if package is not None else served_compiles.site(caller)  # a library's call, or a user's
        if model is None:  # @torch.compile(...): the decorator, its caller's as the call it makes
            return lambda fn: _routed(package, at, fn, options, original)
        return _routed(package, at, model, options, original)

    return compile


def _package_on_stack(frame: Any) -> str | None:
    """The first package served here whose code runs ``frame`` or a frame that called it."""
    while frame is not None:
        package = _package_of(frame.f_globals.get("__name__"))
        if package is not None:
            return package
        frame = frame.f_back
    return None


def _routed(package: str | None, at: dict[str, Any] | None, model: Any, options: dict[str, Any],
            original: Callable[..., Any]) -> Any:
    """The package's own call served; another's, where it is a library's compile the build recorded
    on a package's behalf (dependency_compiles.py); any other, torch's, untouched."""
    if package is None and at is not None:
        try:
            with entry_install.this_process.lock:
                package = dependency_compiles.made_for(entry_install.this_process.packages, model, at)
        except Exception:  # never break a torch.compile call
            log.debug("hatch-precompile: not serving %r", model, exc_info=True)
    if package is None:
        return original(model, **options)
    return _served(package, model, options, original, at)


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
    with entry_install.this_process.lock:
        return next((p for p in entry_install.this_process.packages if module == p or module.startswith(p + ".")), None)


def _served(package: str, model: Any, options: dict[str, Any], original: Callable[..., Any],
            at: dict[str, Any] | None = None) -> Any:
    """``original(model, **options)``, with the shipped entry of ``model`` installed (now, or at its
    first call) where one was shipped for this call (``at``: the library call that makes it on the
    package's behalf; None: the package's own)."""
    try:
        function = _shipped(package, model, options, at)
    except Exception:  # never break a torch.compile call
        log.debug("hatch-precompile: not serving %r", model, exc_info=True)
        function = None
    if function is None:
        return original(model, **options)
    compiled = _compiled(original, model, options)
    from hatch_precompile.run.torch_internals.served import compile_scope

    when = dependency_compiles.running(package) if at is not None else None  # a library's: the package's calls
    if not compile_scope.mark(compiled, served_compiles.source_key(function.qualname, function.firstlineno), when):
        entry_install.said(function, "traced: which torch.compile a call of it runs under cannot be told (torch moved)")
        return compiled
    import torch

    if entry_install.this_process.packages[package].found.manifest.env.get("gpu") and not torch.cuda.is_initialized():
        if not callable(compiled) or isinstance(model, torch.nn.Module):
            entry_install.said(function, "traced: a module compiled before CUDA was initialised is not served")
            return compiled
        return entry_install.install_at_first_call(package, model, function, compiled)
    name = function.name
    with entry_install.this_process.lock:
        outcome = entry_install.this_process.at_import.get(name)
        if outcome is not None:  # installed at its module's import: asked for now (once: a refusal at a
            entry_install.this_process.at_import[name] = None  # first run is said over it, and stays)
            entry_install.said(function, outcome)
            entry_install.threads_at_first_call(compiled, name)
            return compiled
    if function.install_at == "first-call" and compile_scope.at_first_call(compiled, functools.partial(
            entry_install.again, package, model, function)):
        entry_install.said(function, "installed at its first call, where the build's proof installed it")
        entry_install.graphs_ahead(package, function)
        return compiled
    if entry_install.install(package, model, function, compiled):
        entry_install.threads_at_first_call(compiled, entry_install.key_of(function))
    return compiled


def _shipped(package: str, model: Any, options: dict[str, Any],
             at: dict[str, Any] | None) -> served_compiles.Function | None:
    """The shipped function for this call, or None (said in ``served()`` where one was shipped)."""
    found = served_compiles.function_key(model)
    if found is None:
        return None
    key, module, qualname, _ = found
    with entry_install.this_process.lock:
        index = entry_install.this_process.packages[package].index
        function = index.functions.get(key)
    if function is None or (function.module, function.qualname) != (module, qualname):
        named = f"{module}.{qualname}"
        why = next((why for name, why in index.not_served.items() if name == named or name.startswith(named + ", ")), None)
        if why is not None:  # the build compiled it and did not ship it: said, not left out
            entry_install.said_of(named, f"traced: the build did not serve it untraced: {why}")
        return None
    if at is None and function.made_by is not None:
        entry_install.said(function, f"traced: compiled by the package itself, where the build's compile of it was "
                                     f"{served_compiles.site_name(function.made_by)}'s")
        return None
    if not served_compiles.takes(function, options):
        entry_install.said(function, "traced: compiled with other options than the build's")
        return None
    function = served_compiles.part_for(function, model)
    if not function.entry:
        entry_install.said(function, "traced: the build's workloads compiled it for modules of other classes only")
        return None
    return function


