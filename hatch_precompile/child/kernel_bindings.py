"""Each name of Inductor's ``extern_kernels`` as a path from ``torch`` that gives the very object
registered under it (``torch.mm``, ``torch.ops.mkldnn._linear_pointwise``), proven by identity in the
process that compiled: the generated code's header can then bind what it calls without importing
the lowerings that register them (builder/caches/lean_headers.py). A name with no such path is left out."""

from __future__ import annotations

import functools
import sys
from typing import Any, Iterator


def proven() -> dict[str, str]:
    """``{name: path}`` for each registered extern kernel that ``path`` gives, identical; {} where
    Inductor's registry is not imported here or not as expected."""
    module = sys.modules.get("torch._inductor.select_algorithm")
    torch = sys.modules.get("torch")
    if module is None or torch is None:
        return {}
    try:
        registered = dict(vars(module.extern_kernels))
    except Exception:
        return {}
    found = {}
    for name, kernel in registered.items():
        if not name.isidentifier() or name.startswith("__"):
            continue
        for path in _candidates(name, kernel):
            try:
                same = functools.reduce(getattr, path.split(".")[1:], torch) is kernel
            except Exception:
                continue
            if same:
                found[name] = path
                break
    return found


def _candidates(name: str, kernel: Any) -> Iterator[str]:
    yield f"torch.{name}"  # torch.mm, torch.addmm: what kernel/mm.py registers
    packet = getattr(kernel, "_overloadpacket", None)  # an operator overload: its packet's name, then its own
    qualified = getattr(packet if packet is not None else kernel, "_qualified_op_name", None)
    if isinstance(qualified, str) and qualified.count("::") == 1:
        namespace, op = qualified.split("::")
        path = f"torch.ops.{namespace}.{op}"
        yield path if packet is None else f"{path}.{getattr(kernel, '_overloadname', '')}"
