"""``torch.compile``'s compiler config, made when it is asked for rather than at the call.

``torch.compile(fn)`` with the Inductor backend asks the backend for its config at once
(``_TorchCompileInductorWrapper.get_compiler_config``), which imports ``torch._inductor.compile_fx``
and with it Inductor's whole compiler: lowerings, the algorithm templates (each compiled by Jinja),
flex attention -- over a second on 2 cores. The config is only kept for the compiled object's
public ``get_compiler_config()``. For a call whose function is served from a shipped entry
(run/served/served_compile.py), nothing else needs that compiler unless a call is traced, which imports
it then. So, for those calls only, the backend answers None at the call, and the compiled object's
``get_compiler_config()`` asks the backend itself, the first time it is called.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

from hatch_precompile.run.torch_internals.registry import lookup

_deferring = threading.local()  # this thread's torch.compile call whose config waits


@contextlib.contextmanager
def deferred() -> Iterator[list[Any]]:
    """Within: the Inductor backends this thread's torch.compile made, whose config was not asked."""
    _install()
    made: list[Any] = []
    _deferring.backends = made
    try:
        yield made
    finally:
        _deferring.backends = None


def answer_later(compiled: Any, backend: Any) -> None:
    """``compiled.get_compiler_config()`` asks ``backend``, once, when it is called."""
    ask = _original()
    if ask is None:
        return
    answer: list[Any] = []

    def get_compiler_config() -> Any:
        if not answer:
            answer.append(ask(backend))
        return answer[0]

    try:
        compiled.get_compiler_config = get_compiler_config
    except Exception:  # an object that takes no attribute: its config stays None
        pass


def _original() -> Any:
    import torch

    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    method = getattr(wrapper, "get_compiler_config", None) if wrapper is not None else None
    return getattr(method, "__wrapped__", method)


def _install() -> None:
    """Once: the backend's method answers None (and is noted) while a deferred call is on this thread."""
    point = lookup("compiler-config", "wrap")
    import torch

    wrapper = getattr(torch, point.qualname.split(".")[0], None)
    method = getattr(wrapper, "get_compiler_config", None)
    if wrapper is None or method is None or getattr(method, "__wrapped__", None) is not None:
        return

    def get_compiler_config(self: Any) -> Any:
        made = getattr(_deferring, "backends", None)
        if made is None:
            return method(self)
        made.append(self)
        return None

    get_compiler_config.__wrapped__ = method  # type: ignore[attr-defined]
    wrapper.get_compiler_config = get_compiler_config
