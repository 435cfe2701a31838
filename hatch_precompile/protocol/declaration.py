"""What the hook's table declared, carried by every wheel (precompiled or not) for ``warm`` and ``bake``.

Written from the build's checked Options; read back by builder/options.py's ``read_declaration``,
with the table's own checks, so that a value is valid in one sense everywhere and a bad one is
named, never silently replaced by a default.
"""

from __future__ import annotations

import dataclasses
import json

from hatch_precompile.protocol.names import DEFAULT_TIMEOUT

DECLARATION_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What the hook's table declared, carried by every wheel (precompiled or not) for ``warm``."""

    package: str  # the package that calls `load()`
    workloads: tuple[str, ...]  # the workloads, `module:callable`
    timeout: float = DEFAULT_TIMEOUT  # seconds for all workloads
    device: str = "auto"  # where the workloads run

    def dumps(self) -> str:
        data = {"format": DECLARATION_FORMAT, "package": self.package, "workloads": list(self.workloads),
                "timeout": self.timeout, "device": self.device}
        return json.dumps(data, indent=1, sort_keys=True) + "\n"
