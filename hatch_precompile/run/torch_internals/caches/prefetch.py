"""Work started ahead of torch's need: cached computations (``torch_key``, ``triton_key``) started in
the background with a memo, a cached function answered without its callee (``answer_without``),
and what waits for Dynamo's first compile (``at_first_compile``)."""

from __future__ import annotations

import builtins
import functools
import importlib
import inspect
import logging
import threading
from types import FunctionType, ModuleType
from typing import Any, Callable, Protocol

from hatch_precompile.run.torch_internals.import_hook import after_import
from hatch_precompile.run.torch_internals.patching import MARK, enabled, resolve, run_hook, wrap
from hatch_precompile.run.torch_internals.registry import lookup

log = logging.getLogger("hatch_precompile.touchpoints")


class Memo(Protocol):
    """A value this machine computed before, kept under a key of everything its computation reads."""

    def get(self) -> Any: ...  # the value, or None
    def put(self, value: Any) -> None: ...


def prefetch(name: str, memo: Memo | None = None) -> None:
    """Start ``module.qualname()`` (a cached computation: ``torch_key``) in the background once
    ``module`` is imported: torch's own ``.prefetch()`` where it has one (2.13+), else a thread
    whose result a caller waits for rather than computing it a second time. Where ``module``
    lacks it, ``elsewhere``'s function of that name (an older torch's home of ``triton_key``).

    With ``memo``, where torch's cache takes a value (``.set``, 2.13+): the remembered value is
    set, and nothing is computed; else torch's computation runs in the background and its result
    is remembered. Nothing starts in the background before Dynamo's compile-event logger exists
    (``_event_logger_made``)."""
    point = lookup(name, "prefetch")
    module, qualname, elsewhere = point.module, point.qualname, point.elsewhere
    if not enabled():
        return

    def start(loaded: ModuleType) -> None:
        try:
            owner, function = resolve(loaded, qualname)
        except AttributeError:
            if elsewhere is None:
                return
            owner, function = resolve(importlib.import_module(elsewhere), qualname)
        name = qualname.rsplit(".", 1)[-1]
        if memo is not None and callable(getattr(function, "set", None)) and not getattr(function, MARK, False):
            value = _guarded_call(memo.get)
            if value is not None:
                function.set(value)  # torch's own way to fill its cache (RuntimeError: filled already)
            elif _event_logger_made():
                setattr(owner, name, _computed_in_background(function, qualname, then=memo.put))
        elif callable(getattr(function, "prefetch", None)):
            if _event_logger_made():
                function.prefetch()
        elif callable(function) and not getattr(function, MARK, False) and _event_logger_made():
            setattr(owner, name, _computed_in_background(function, qualname))

    after_import(module, start, name)


def _event_logger_made() -> bool:
    """Whether Dynamo's compile-event logger exists, made now in this thread if torch had not made it.

    Torch makes it at its first use, without a lock, and ``torch_key`` times itself with it
    (``dynamo_timed``). Hashed in the background while Dynamo's first compile began, each thread
    made one, and the later one replaced the logger that held the compile's open event: torch
    2.7.1 then raised "No toplevel event active" at the compile's guards. Made first, both threads
    share it, each with its own stack of events. False where it cannot be made: then nothing starts
    in the background."""
    point = lookup("event-logger", "call")
    try:
        getattr(importlib.import_module(point.module), point.qualname)()
    except Exception:
        log.debug("touchpoint event-logger: not made; nothing is hashed in the background", exc_info=True)
        return False
    return True


def _guarded_call(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception:
        log.debug("%s failed", getattr(function, "__qualname__", function), exc_info=True)
        return None


def answer_without(name: str, callee: str, otherwise: Callable[[], None]) -> None:
    """Once ``module`` is imported, let ``module.qualname`` (a cached function of no arguments:
    ``CacheBase.get_system``) answer without ever calling ``callee`` (``triton_key``) where its
    answer cannot depend on it; else run ``otherwise()`` (prefetch ``callee``).

    Torch's own code is run twice, with two different stand-ins for ``callee`` (in its globals,
    and in what its ``from ... import`` statements bring in): when both answers are equal, the
    callee's value is discarded (torch before 2.15 on a machine where CUDA shows no GPU), and that
    answer is the function's from then on. Anything unexpected, a difference or an error: nothing
    is replaced, and torch computes it as always."""
    point = lookup(name, "answer")
    if not enabled():
        return

    def install(loaded: ModuleType) -> None:
        try:
            replaced = _answer_without(loaded, point.qualname, callee)
        except Exception:
            log.debug("touchpoint %s: left as torch has it", name, exc_info=True)
            replaced = False
        if not replaced:
            otherwise()

    after_import(point.module, install, name)


_STAND_INS = (None, "hatch-precompile: a stand-in value")  # another type too: a use of it differs


def _answer_without(module: ModuleType, qualname: str, callee: str) -> bool:
    owner, cached = resolve(module, qualname)
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
            log.debug("%s failed in the background", qualname, exc_info=True)
        try:
            if then is not None and "value" in result:
                then(result["value"])  # before the caller goes on: a short process exits soon after
        except Exception:
            log.debug("%s: its result was not remembered", qualname, exc_info=True)
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


_first_compile: list[Callable[[], Any]] = []  # what waits for Dynamo's first compile in this process


def at_first_compile(start: Callable[[], Any]) -> None:
    """Run ``start()`` when Dynamo starts compiling a frame: work only a compile needs, which a
    process that imports a compiling package and never calls it (a CLI's --help) does not pay.
    Under ``HATCH_PRECOMPILE_NO_PATCHES`` nothing is wrapped, so ``start`` never runs."""
    _first_compile.append(start)
    wrap("dynamo-compile", before=_compiling)


def _compiling(arguments: dict[str, Any]) -> None:
    while _first_compile:  # one start failing leaves the others and the compile alone
        run_hook(None, _first_compile.pop(0), "dynamo-compile", "a first-compile start", None)
