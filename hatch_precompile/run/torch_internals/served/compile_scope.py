"""Which served ``torch.compile`` a call runs under, per thread.

A shipped entry is installed on the function's code object, where Dynamo's frame evaluation checks
it for every compile of that code: another ``torch.compile`` of the same function (the user's, with
another backend or mode) would run the package's graphs. Each compiled object the package's own call
returned pushes its function's key while it runs (torch's ``enter_exit_hooks`` of its compile
context, run around every call), and an installed guarded code runs only where the innermost
served compile running is its own function's (run/torch_internals/served/dynamo_cache.py). A compile of
anyone else's pushes nothing, so a call through it is traced, under its own backend and options.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from hatch_precompile.run.torch_internals.registry import lookup

_running = threading.local()


def mark(compiled: Any, key: str, when: Callable[[], bool] | None = None) -> bool:
    """Have ``compiled`` (what ``torch.compile`` returned) push ``key`` while each call of it runs
    (only each call for which ``when()`` holds, where given: a library's compile, served while the
    package's code runs it); whether it could be."""
    lookup("compile-context", "setting")
    context = _context_of(compiled)
    hooks = getattr(context, "enter_exit_hooks", None)
    if not isinstance(hooks, list):
        return False
    if any(getattr(hook, "_hatch_precompile_key", None) == key for hook in hooks):
        return True

    def enter() -> Callable[[], object]:
        stack = _stack()
        stack.append(key if when is None or when() else "")  # "": no served compile's, for this call
        return stack.pop  # torch calls it once the call is over, raised or not

    enter._hatch_precompile_key = key  # type: ignore[attr-defined]
    hooks.append(enter)
    return True


def each_call(compiled: Any, run: Callable[[], None]) -> bool:
    """Have ``run()`` called at every call of ``compiled`` (before its frame is evaluated); whether it
    could be."""
    lookup("compile-context", "setting")
    hooks = getattr(_context_of(compiled), "enter_exit_hooks", None)
    if not isinstance(hooks, list):
        return False

    def enter() -> Callable[[], object]:
        run()
        return _nothing

    hooks.append(enter)
    return True


def at_first_call(compiled: Any, run: Callable[[], None]) -> bool:
    """Have ``run()`` called once, at the first call of ``compiled`` (before its frame is evaluated);
    whether it could be."""
    lookup("compile-context", "setting")
    hooks = getattr(_context_of(compiled), "enter_exit_hooks", None)
    if not isinstance(hooks, list):
        return False
    done: list[bool] = []
    lock = threading.Lock()

    def enter() -> Callable[[], object]:
        if not done:  # the lock only until it has run: the hook stays on every later call's path
            with lock:
                if not done:
                    done.append(True)
                    run()
        return _nothing

    hooks.append(enter)
    return True


def _nothing() -> None:
    return None


def serving(key: str) -> Callable[[], bool]:
    """Whether the innermost served compile running on this thread is ``key``'s, asked at each call."""
    def check() -> bool:
        stack: list[str] | None = getattr(_running, "stack", None)
        return bool(stack) and stack[-1] == key  # type: ignore[index]

    return check


def innermost() -> str | None:
    """The key of the innermost marked compile running on this thread, or None."""
    stack: list[str] | None = getattr(_running, "stack", None)
    return stack[-1] or None if stack else None


def _stack() -> list[str]:
    stack = getattr(_running, "stack", None)
    if stack is None:
        stack = _running.stack = []
    return stack


def first_code_of(compiled: Any) -> Any:
    """The record of the compiled function's own code in the package torch's ``caching_precompile``
    made for ``compiled`` (the first code of every entry that compile records), or None (the flag off,
    or torch moved): the build tells one compile's entries from another's by it."""
    lookup("compile-context", "setting")
    codes = getattr(getattr(_context_of(compiled), "_package", None), "_codes", None)
    return next(iter(codes.values()), None) if isinstance(codes, dict) else None


def _context_of(compiled: Any) -> Any:
    """The compile context (torch's ``_TorchDynamoContext``) behind a compiled module or function."""
    context = getattr(compiled, "dynamo_ctx", None)  # an OptimizedModule's
    if context is not None:
        return context
    for cell in getattr(compiled, "__closure__", None) or ():  # a compiled function's wrapper closes over it
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(getattr(value, "enter_exit_hooks", None), list) and hasattr(value, "callback"):
            return value
    return None
