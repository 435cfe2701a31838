"""Wrapping torch's functions and methods: before, around, instead and after hooks, each run so that it
can neither break a call nor leave torch's compile bookkeeping (Dynamo's open events, its metrics
context) other than it found it."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import sys
from types import ModuleType
from typing import Any, Callable

from hatch_precompile.run import variables
from hatch_precompile.run.torch_internals.import_hook import after_import
from hatch_precompile.run.torch_internals.registry import lookup

log = logging.getLogger("hatch_precompile.touchpoints")


MARK = "_hatch_precompile_patched"
PASS = object()  # what an ``instead`` hook returns to let torch answer

Hook = Callable[[dict[str, Any]], Any]
After = Callable[[dict[str, Any], Any], None]
Around = Callable[[dict[str, Any]], "Callable[[], None] | None"]  # returns what undoes it, once the call ends
OnError = Callable[[dict[str, Any], Exception], Any]  # what a call that raised returns instead (PASS: it raises)


class _Hooks:
    def __init__(self) -> None:
        self.before: list[Hook] = []
        self.around: list[Around] = []
        self.instead: list[Hook] = []
        self.after: list[After] = []
        self.on_error: list[OnError] = []


_hooks: dict[tuple[str, str], _Hooks] = {}


def enabled() -> bool:
    return not variables.no_patches()


def wrap(name: str, *, before: Hook | None = None, around: Around | None = None, instead: Hook | None = None,
         after: After | None = None, on_error: OnError | None = None) -> None:
    """Hook into the touchpoint ``name`` (a function or method of torch's) once its module is imported.
    ``around`` runs before torch's function and returns what undoes it, called however the call ends;
    ``on_error`` is given what torch's function raised, and returns what the call returns instead
    (PASS, or a hook that fails: the exception goes on as torch raised it)."""
    point = lookup(name, "wrap")
    if not enabled():
        return
    hooks = _hooks.setdefault((point.module, point.qualname), _Hooks())
    for kind, hook in (("before", before), ("around", around), ("instead", instead), ("after", after),
                       ("on_error", on_error)):
        if hook is not None and hook not in getattr(hooks, kind) and hook not in _dropped:
            getattr(hooks, kind).append(hook)
    after_import(point.module, lambda loaded: _install(loaded, point.qualname, hooks, name), name)


def wrapped(name: str) -> bool:
    """Whether the touchpoint ``name``'s function is this package's wrapper now (its hooks see calls
    whose arguments they can read): False where torch's module is not imported, or the wrapper was
    not installed or was replaced."""
    point = lookup(name, "wrap")
    module = sys.modules.get(point.module)
    try:
        _, found = resolve(module, point.qualname) if module is not None else (None, None)
    except AttributeError:
        return False
    return bool(getattr(found, MARK, False)) and getattr(found, "_hatch_precompile_signature", True)


def _install(module: ModuleType, qualname: str, hooks: _Hooks, name: str) -> None:
    owner, original = resolve(module, qualname)
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
            changes = run_hook(hooks.before, hook, name, "a before hook", None, arguments)
            if changes and bound is not None:
                bound.arguments.update(changes)
                arguments.update(changes)
        if bound is not None:
            args, kwargs = bound.args, bound.kwargs
        undo = [run_hook(hooks.around, hook, name, "an around hook", None, arguments) for hook in list(hooks.around)]
        try:
            for hook in list(hooks.instead):
                answer = run_hook(hooks.instead, hook, name, "an instead hook", PASS, arguments)
                if answer is not PASS:
                    return answer
            try:
                result = original(*args, **kwargs)
            except Exception as exc:
                for on_error in list(hooks.on_error):
                    answer = run_hook(hooks.on_error, on_error, name, "an error hook", PASS, arguments, exc)
                    if answer is not PASS:
                        return answer
                raise
        finally:
            for end in reversed(undo):
                if callable(end):
                    run_hook(None, end, name, "an around hook's end", None)
        for observer in list(hooks.after):  # an observer or a shortcut must never break a compile
            run_hook(hooks.after, observer, name, "an after hook", None, arguments, result)
        return result

    setattr(wrapper, MARK, True)
    wrapper._hatch_precompile_signature = signature is not None  # type: ignore[attr-defined]
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, qualname.rsplit(".", 1)[-1], staticmethod(wrapper) if static else wrapper)


_dropped: list[Callable[..., Any]] = []  # hooks that changed torch's compile bookkeeping: never called again


def run_hook(hooks: list[Any] | None, hook: Callable[..., Any], name: str, what: str, failed: Any, *args: Any) -> Any:
    """``hook(*args)``; ``failed`` where it raised, or where it left torch's compile bookkeeping
    other than it found it: then what can be is put back, and the hook is taken out of ``hooks``
    for the rest of the process. Both are logged under the touchpoint ``name``."""
    found = _compile_state()
    try:
        result = hook(*args)
    except Exception:
        log.debug("touchpoint %s: %s failed", name, what, exc_info=True)
        result = failed
    changed = _put_back(found)
    if not changed:
        return result
    if hooks is not None and hook in hooks:
        hooks.remove(hook)
    _dropped.append(hook)
    log.debug("touchpoint %s: %s changed torch's compile bookkeeping (%s); put back where it could be, and not "
              "called again in this process", name, what, "; ".join(changed))
    return failed


@dataclasses.dataclass(frozen=True)
class _CompileState:
    """Torch's compile bookkeeping as one thread sees it: Dynamo's event logger (the process's one),
    this thread's stacks of open events and their data, and its metrics context and depth."""

    utils: ModuleType
    logger: Any
    stacks: tuple[list[Any], ...]
    events: dict[str, Any]
    metrics: Any
    depth: Any


def _compile_state() -> _CompileState | None:
    """Torch's compile bookkeeping now; None where Dynamo is not imported (nothing to keep) or its
    bookkeeping is not as expected (nothing is checked)."""
    point = lookup("compile-state", "read")
    utils = sys.modules.get(point.module)
    if utils is None:
        return None
    try:
        logger = utils.CHROMIUM_EVENT_LOG  # None until Dynamo first times an event
        stacks = _event_stacks(logger)
        events = dict(logger.get_event_data()) if logger is not None else {}
        metrics = utils.get_metrics_context()
        return _CompileState(utils, logger, tuple(list(s) for s in stacks), events, metrics,
                             getattr(metrics, "_level", None))
    except Exception:
        log.debug("touchpoint compile-state: not read; the hooks run unchecked", exc_info=True)
        return None


def _event_stacks(logger: Any) -> tuple[list[Any], ...]:
    return (logger.get_stack(), logger.get_pt2_compile_substack()) if logger is not None else ()


def _put_back(found: _CompileState | None) -> list[str]:
    """What differs from ``found`` now, each put back where it can be; [] where nothing does (or it
    cannot be read). A logger torch made meanwhile, where it had none, is its own first use."""
    if found is None:
        return []
    changed = []
    try:
        utils, logger = found.utils, found.logger
        if logger is not None and utils.CHROMIUM_EVENT_LOG is not logger:
            setattr(utils, "CHROMIUM_EVENT_LOG", logger)  # the one that holds the open events
            changed.append("Dynamo's event logger replaced")
        stacks = _event_stacks(logger)
        if [list(s) for s in stacks] != list(found.stacks):
            for stack, before in zip(stacks, found.stacks):
                stack[:] = before
            data = logger.get_event_data()
            for event, values in found.events.items():
                data.setdefault(event, values)  # what a closed event had gathered
            changed.append("open events closed or left open")
        metrics = utils.get_metrics_context()
        if metrics is not found.metrics:
            changed.append("the metrics context replaced (not put back)")
        elif getattr(metrics, "_level", None) != found.depth:
            if isinstance(found.depth, int):
                metrics._level = found.depth  # a context left early records its metrics twice, not never
            changed.append("the metrics context entered or left")
    except Exception:
        log.debug("touchpoint compile-state: not compared", exc_info=True)
    return changed


def resolve(module: ModuleType, qualname: str) -> tuple[Any, Any]:
    """(the object that holds it, the attribute) of a dotted name inside ``module``."""
    owner: Any = module
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, getattr(owner, name)


def _bind(signature: inspect.Signature | None, args: tuple, kwargs: dict) -> inspect.BoundArguments | None:
    if signature is None:
        return None
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return bound
