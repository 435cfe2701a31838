"""An entry installed on a code beside the entries already there (run/torch_internals/served/dynamo_cache.py).

``module.compile()`` compiles torch's ``Module._call_impl``, one code for every module class, and
the build ships one entry per class (protocol/served_compiles.py's ``parts``), installed as each
class is compiled. Torch's ``CompilePackage`` resets every precompile entry of its code when it is
made and when it installs (``uninstall``: one entry a code, as torch's own cache loads one), which
would drop the classes installed before; while a part is installed, that reset is withheld, and the
install checks that the entries already on the code are still there.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from hatch_precompile.run.torch_internals.registry import lookup


def entries_on(code: Any) -> int:
    """How many precompile entries ``code`` holds."""
    lookup("precompile-entry", "call")
    from torch._C._dynamo import eval_frame

    return len(eval_frame._debug_get_precompile_entries(code))


@contextlib.contextmanager
def beside_others(code: Any, others: bool) -> Iterator[None]:
    """Torch's reset of ``code``'s precompile entries withheld meanwhile, where ``others`` (another
    part's entries may be on it); RuntimeError where those on it before are not all there after."""
    if not others:
        yield
        return
    lookup("precompile-entry", "call")
    from torch._C._dynamo import eval_frame

    before = entries_on(code)
    reset = eval_frame._reset_precompile_entries
    eval_frame._reset_precompile_entries = _kept  # read at each call by torch's uninstall()
    try:
        yield
    finally:
        eval_frame._reset_precompile_entries = reset
    if entries_on(code) < before:
        raise RuntimeError("torch dropped the entries of the classes installed before on the same code")


def _kept(code: Any) -> None:
    """Torch's reset, withheld: the entries on the code stay."""
