"""Every place hatch-precompile touches torch's internals, owned here: lazily, once, failing safe.

A touchpoint is a function or method of torch's that is wrapped, or a setting that is set, right
after its module is first imported (so that ``import pkg`` does not pay for importing Inductor).
The features hook into them; this module is the only one that replaces anything of torch's:

=======================  ===============================================  ==============================
touchpoint               torch's                                          who hooks in, and why
=======================  ===============================================  ==============================
``write``                ``_inductor.codecache.write``                    build: each kernel's command
                                                                          line (child/observe.py);
                                                                          load: which kernels are built
                                                                          (run/speedups.py)
``precompile-header``    ``_inductor.codecache._precompile_header``       skip the header for a built
                                                                          kernel (speedups)
``torch-key``            ``_inductor.codecache.torch_key``                hash torch's sources in the
                                                                          background (speedups)
``triton-key``           ``_inductor.codecache.triton_key`` (2.13+; else  hash Triton's too, or set
                         ``..runtime.triton_compat.triton_key``)          the key this machine computed
                                                                          before (speedups)
``system``               ``_inductor.codecache.CacheBase.get_system``     without a GPU: answered without
                                                                          Triton's key where it is
                                                                          unused (speedups)
``check-build``          ``_inductor.cpu_vec_isa.VecISA.check_build``     answer ISA probes a shipped
                                                                          set proved (speedups)
``probe-load``           ``_inductor.cpu_vec_isa.VecISA._probe_load``     remember passed probes (speedups)
``autotune-recheck``     ``..triton_heuristics.CachingAutotuner``         find shipped tuned configs
                         ``.recheck_autotune_cache``                      (run/tuned_configs.py)
``hash-details``         ``_inductor.codecache.FxGraphHashDetails``       a stand-in compiler's key
                         ``.__init__``                                    (run/standin.py)
``inductor-config``      ``_inductor.config`` (``cpp.dynamic_threads``)   the set's settings (standin)
``compile-command``      ``_inductor.cpp_builder.run_compile_cmd``        build: portable kernels, their
                                                                          flags (build/isa.py)
``dynamo-compile``       ``_dynamo.convert_frame._compile``               build, verify, snoop: each
                                                                          graph's call (child/observe.py)
``key-details``          ``_inductor.codecache.FxGraphHashDetails``       build, verify, snoop: what each
                         ``.__init__`` (and its AOTAutograd subclass)     key is made of (child/keys.py)
``fx-key``, ``aot-key``  ``_inductor.codecache.compiled_fx_graph_hash``,  the key itself (child/keys.py)
                         ``_functorch._aot_autograd.autograd_cache``
                         ``.autograd_cache_key``
=======================  ===============================================  ==============================

A wrapper takes any signature and passes every call through; a hook sees the call's arguments by
name (defaults filled in; none when the signature cannot be read) and may, before the call,
replace some (``before``), answer it in place of torch (``instead``, returning anything but
``PASS``), or look at the result (``after``). A hook that raises is as if it had not run: it can
slow torch down, never break a compile. What is not where we expect it is left alone.
``HATCH_PRECOMPILE_NO_PATCHES=1`` (or its older name ``HATCH_PRECOMPILE_NO_SPEEDUPS``) turns every
wrapper and prefetch off: torch's code then runs untouched, only slower. The set's settings
(``inductor-config``) still apply: they are torch's own knobs, and without them every shipped
graph would miss.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import importlib.abc
import importlib.util
import inspect
import sys
import threading
from types import FunctionType, ModuleType
from typing import Any, Callable, Protocol

from hatch_precompile.run import variables

CODECACHE = "torch._inductor.codecache"
VEC_ISA = "torch._inductor.cpu_vec_isa"
TRITON_HEURISTICS = "torch._inductor.runtime.triton_heuristics"
CONFIG = "torch._inductor.config"
CPP_BUILDER = "torch._inductor.cpp_builder"
CONVERT_FRAME = "torch._dynamo.convert_frame"
TRITON_COMPAT = "torch._inductor.runtime.triton_compat"
AUTOGRAD_CACHE = "torch._functorch._aot_autograd.autograd_cache"

MARK = "_hatch_precompile_patched"
PASS = object()  # what an ``instead`` hook returns to let torch answer

Hook = Callable[[dict[str, Any]], Any]
After = Callable[[dict[str, Any], Any], None]


class _Hooks:
    def __init__(self) -> None:
        self.before: list[Hook] = []
        self.instead: list[Hook] = []
        self.after: list[After] = []


_hooks: dict[tuple[str, str], _Hooks] = {}


def enabled() -> bool:
    return not variables.no_patches()


def wrap(module: str, qualname: str, *, before: Hook | None = None, instead: Hook | None = None,
         after: After | None = None) -> None:
    """Hook into ``module.qualname`` (``"VecISA.check_build"``) once ``module`` is imported."""
    if not enabled():
        return
    hooks = _hooks.setdefault((module, qualname), _Hooks())
    for kind, hook in (("before", before), ("instead", instead), ("after", after)):
        if hook is not None and hook not in getattr(hooks, kind):
            getattr(hooks, kind).append(hook)
    after_import(module, lambda loaded: _install(loaded, qualname, hooks))


def set_config(module: str, name: str, value: Any) -> None:
    """Set ``module``'s ``name`` (``"cpp.dynamic_threads"``) once it is imported, if it has it.

    A setting, not a patch: it applies under the switch too, or the shipped graphs would miss."""
    after_import(module, lambda loaded: _set(loaded, name, value))


class Memo(Protocol):
    """A value this machine computed before, kept under a key of everything its computation reads."""

    def get(self) -> Any: ...  # the value, or None
    def put(self, value: Any) -> None: ...


def prefetch(module: str, qualname: str, elsewhere: str | None = None, memo: Memo | None = None) -> None:
    """Start ``module.qualname()`` (a cached computation: ``torch_key``) in the background once
    ``module`` is imported: torch's own ``.prefetch()`` where it has one (2.13+), else a thread
    whose result a caller waits for rather than computing it a second time. Where ``module``
    lacks it, ``elsewhere``'s function of that name (an older torch's home of ``triton_key``).

    With ``memo``, where torch's cache takes a value (``.set``, 2.13+): the remembered value is
    set, and nothing is computed; else torch's computation runs in the background and its result
    is remembered."""
    if not enabled():
        return

    def start(loaded: ModuleType) -> None:
        try:
            owner, function = _resolve(loaded, qualname)
        except AttributeError:
            if elsewhere is None:
                return
            owner, function = _resolve(importlib.import_module(elsewhere), qualname)
        name = qualname.rsplit(".", 1)[-1]
        if memo is not None and callable(getattr(function, "set", None)) and not getattr(function, MARK, False):
            value = _guarded_call(memo.get)
            if value is not None:
                function.set(value)  # torch's own way to fill its cache (RuntimeError: filled already)
            else:
                setattr(owner, name, _computed_in_background(function, qualname, then=memo.put))
        elif callable(getattr(function, "prefetch", None)):
            function.prefetch()
        elif callable(function) and not getattr(function, MARK, False):
            setattr(owner, name, _computed_in_background(function, qualname))

    after_import(module, start)


def _guarded_call(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception:
        return None


def answer_without(module: str, qualname: str, callee: str, otherwise: Callable[[], None]) -> None:
    """Once ``module`` is imported, let ``module.qualname`` (a cached function of no arguments:
    ``CacheBase.get_system``) answer without ever calling ``callee`` (``triton_key``) where its
    answer cannot depend on it; else run ``otherwise()`` (prefetch ``callee``).

    Torch's own code is run twice, with two different stand-ins for ``callee`` (in its globals,
    and in what its ``from ... import`` statements bring in): when both answers are equal, the
    callee's value is discarded (torch before 2.15 on a machine where CUDA shows no GPU), and that
    answer is the function's from then on. Anything unexpected, a difference or an error: nothing
    is replaced, and torch computes it as always."""
    if not enabled():
        return

    def install(loaded: ModuleType) -> None:
        try:
            replaced = _answer_without(loaded, qualname, callee)
        except Exception:
            replaced = False
        if not replaced:
            otherwise()

    after_import(module, install)


_STAND_INS = (None, "hatch-precompile: a stand-in value")  # another type too: a use of it differs


def _answer_without(module: ModuleType, qualname: str, callee: str) -> bool:
    owner, cached = _resolve(module, qualname)
    raw = getattr(cached, "__wrapped__", None)
    name = qualname.rsplit(".", 1)[-1]
    if (getattr(cached, MARK, False) or not callable(getattr(cached, "cache_clear", None))
            or not isinstance(raw, FunctionType) or inspect.signature(raw).parameters):
        return False  # not functools' cache of a function of no arguments
    first, second = (_run_with(raw, callee, value) for value in _STAND_INS)
    if first != second:
        return False

    def answer() -> Any:
        return first

    functools.update_wrapper(answer, cached)
    answer.cache_clear = lambda: None  # type: ignore[attr-defined]  # nothing of torch's to clear
    setattr(answer, MARK, True)
    static = isinstance(inspect.getattr_static(owner, name, None), staticmethod)
    setattr(owner, name, staticmethod(answer) if static else answer)
    return True


def _run_with(function: FunctionType, callee: str, value: Any) -> Any:
    """``function()`` run as written, but where ``callee`` (global or imported) answers ``value``."""
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return value

    def importing(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        imported = builtins.__import__(name, globals, locals, fromlist, level)
        if fromlist and callee in fromlist:  # `from triton_compat import HAS_TRITON, triton_key`
            copy = ModuleType(imported.__name__)
            copy.__dict__.update(vars(imported))
            setattr(copy, callee, stand_in)
            return copy
        return imported

    scope = dict(function.__globals__)
    if callee in scope:
        scope[callee] = stand_in
    scope["__builtins__"] = {**vars(builtins), "__import__": importing}
    copy = FunctionType(function.__code__, scope, function.__name__, function.__defaults__, function.__closure__)
    return copy()


def _computed_in_background(function: Callable[[], Any], qualname: str,
                            then: Callable[[Any], None] | None = None) -> Callable[..., Any]:
    """``function`` started in a thread now; a call without arguments waits for that result (an
    error there: the call computes it as torch would), which ``then`` is given too. Torch's
    attributes (``.set``) are kept."""
    done = threading.Event()
    result: dict[str, Any] = {}

    def compute() -> None:
        try:
            result["value"] = function()
        except BaseException:  # the caller computes it again, and sees the error there
            pass
        try:
            if then is not None and "value" in result:
                then(result["value"])  # before the caller goes on: a short process exits soon after
        except Exception:
            pass
        finally:
            done.set()

    worker = threading.Thread(target=compute, name=f"hatch-precompile {qualname}", daemon=True)

    @functools.wraps(function)
    def joined(*args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and threading.current_thread() is not worker:
            done.wait()
            if "value" in result:
                return result["value"]
        return function(*args, **kwargs)

    setattr(joined, MARK, True)
    worker.start()
    return joined


def after_import(name: str, patch: Callable[[ModuleType], None]) -> None:
    """Run ``patch(module)`` once ``name`` is imported (now, if it already is); a patch that raises
    is simply not applied."""
    module = sys.modules.get(name)
    if module is not None:
        _guarded(patch)(module)
    elif not any(isinstance(f, _AfterImport) and f.name == name and f.patch is patch for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, patch))


def _install(module: ModuleType, qualname: str, hooks: _Hooks) -> None:
    owner, original = _resolve(module, qualname)
    if not callable(original) or getattr(original, MARK, False):
        return
    try:
        signature: inspect.Signature | None = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None
    static = isinstance(inspect.getattr_static(owner, qualname.rsplit(".", 1)[-1], None), staticmethod)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = _bind(signature, args, kwargs)
        arguments = dict(bound.arguments) if bound is not None else {}
        for hook in list(hooks.before):
            try:
                changes = hook(arguments)
                if changes and bound is not None:
                    bound.arguments.update(changes)
                    arguments.update(changes)
            except Exception:
                pass
        if bound is not None:
            args, kwargs = bound.args, bound.kwargs
        for hook in list(hooks.instead):
            try:
                answer = hook(arguments)
            except Exception:
                answer = PASS
            if answer is not PASS:
                return answer
        result = original(*args, **kwargs)
        for hook in list(hooks.after):
            try:
                hook(arguments, result)
            except Exception:  # an observer or a shortcut must never break a compile
                pass
        return result

    setattr(wrapper, MARK, True)
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, qualname.rsplit(".", 1)[-1], staticmethod(wrapper) if static else wrapper)


def _resolve(module: ModuleType, qualname: str) -> tuple[Any, Any]:
    """(the object that holds it, the attribute) of a dotted name inside ``module``."""
    owner: Any = module
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, getattr(owner, name)


def _set(module: ModuleType, name: str, value: Any) -> None:
    owner, _ = _resolve(module, name)  # AttributeError (a torch without it): left alone
    setattr(owner, name.rsplit(".", 1)[-1], value)


def _bind(signature: inspect.Signature | None, args: tuple, kwargs: dict) -> inspect.BoundArguments | None:
    if signature is None:
        return None
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return bound


def _guarded(patch: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    def run(module: ModuleType) -> None:
        try:
            patch(module)
        except Exception:  # torch's internals are not what we expect: leave them as they are
            pass

    return run


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after ``name`` is first imported."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.patch = patch

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec
        patch = _guarded(self.patch)
        others = [f for f in sys.meta_path if isinstance(f, _AfterImport) and f.name == fullname]
        for other in others:  # several patches of one module: all run after its one import
            sys.meta_path.remove(other)

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            patch(module)
            for other in others:
                _guarded(other.patch)(module)

        loader.exec_module = exec_then_patch
        return spec


# -- torch's AOTInductor C++ loader (run/exported.py): called, never replaced ---------------------


def aoti_loader(torch: Any) -> Any:
    """``torch._C._aoti.AOTIModelPackageLoader``, or None where this torch has none."""
    return getattr(getattr(getattr(torch, "_C", None), "_aoti", None), "AOTIModelPackageLoader", None)


# The loader's arguments by torch version: (path, model name, run single-threaded, runners, device
# index) from 2.8; fewer before. The first form this torch takes is used.
_AOTI_FORMS = (("model", False, 1, -1), ("model", False), ("model",))


def aoti_open(torch: Any, path: str) -> Any:
    """The loader on the package at ``path``; raises (TypeError, RuntimeError) where it refuses."""
    loader = aoti_loader(torch)
    if loader is None:
        raise RuntimeError(f"torch {torch.__version__} has no AOTInductor loader")
    for form in _AOTI_FORMS:
        try:
            return loader(path, *form)
        except TypeError:  # another signature: try the next
            continue
    raise TypeError(f"torch {torch.__version__}'s AOTInductor loader takes none of the known argument forms")


def aoti_bind(loader: Any, constants: dict[str, Any]) -> None:
    """Make ``constants`` the model's own tensors, in place (``user_managed``): the caller's
    later in-place updates are what the model reads. A loader without that form raises."""
    loader.load_constants(constants, False, True, True)  # use_inactive, check_full_update, user_managed


def aoti_compile(torch: Any, program: Any, package_path: str, configs: dict[str, Any]) -> Any:
    """AOTInductor's package of an exported program (build side: the export route)."""
    from torch._inductor import aoti_compile_and_package

    return aoti_compile_and_package(program, package_path=package_path, inductor_configs=configs)
