"""A library's own ``torch.compile``, made on a package's behalf, served as the package's own calls are.

transformers' ``generate`` with a static cache compiles the model's ``__call__`` itself
(``PreTrainedModel.get_compiled_call``); a library's ``@torch.compile`` function runs when the
package calls it. The build records such a compile where the package's code ran what it returned
(builder/served/dynamo_pass.py), with the library call that made it (``made_by``). Here a
``torch.compile`` call is one of those only where it is made at that very call (its module and
function) of that function, with the build's options; and what it returns runs the shipped entry
only at a call the package's code is running (a frame of the package's on the stack): the same
library compile made for anyone else (a user's own ``generate`` on their own model, another
package's) is traced, as torch traces it.

Standard library only.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from hatch_precompile.protocol import served_compiles


def made_for(packages: dict[str, Any], model: Any, at: dict[str, Any]) -> str | None:
    """The package (of ``packages``: name -> its set and index) one of whose compiled functions a
    library's ``torch.compile`` of ``model``, made ``at`` that call, is; or None."""
    found = served_compiles.function_key(model)
    if found is None:
        return None
    key, module, qualname, _ = found
    for package, shipped in packages.items():
        function = shipped.index.functions.get(key) if shipped is not None else None
        if (function is not None and (function.module, function.qualname) == (module, qualname)
                and served_compiles.same_site(function.made_by, at)):
            return package
    return None


def running(package: str) -> Callable[[], bool]:
    """Whether the package's code is running now: a frame of one of its modules on this thread's stack
    (asked at each call of what a library compiled on its behalf)."""
    within = package + "."

    def check() -> bool:
        frame: Any = sys._getframe(1)
        while frame is not None:
            name = frame.f_globals.get("__name__")
            if isinstance(name, str) and (name == package or name.startswith(within)):
                return True
            frame = frame.f_back
        return False

    return check
