"""What the hook's table declared, carried by every wheel (precompiled or not) for ``warm`` and ``bake``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hatch_precompile.protocol import fields
from hatch_precompile.protocol.fields import field
from hatch_precompile.protocol.names import DEFAULT_TIMEOUT, DEVICES, WORKLOAD

DECLARATION_FORMAT = 1


class _Unreadable(Exception):
    pass


def _package(value: Any) -> str:
    if not isinstance(value, str):
        raise _Unreadable
    return value


def _workloads(value: Any) -> tuple[str, ...]:
    if not (isinstance(value, list) and all(isinstance(w, str) and WORKLOAD.fullmatch(w) for w in value)):
        raise _Unreadable
    return tuple(value)


def _timeout(value: Any) -> float:
    valid = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return float(value) if valid else DEFAULT_TIMEOUT


def _device(value: Any) -> str:
    return value if value in DEVICES else "auto"


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What the hook's table declared, carried by every wheel (precompiled or not) for ``warm``."""

    package: str = field(_package, "the package that calls `load()`", required=True)
    workloads: tuple[str, ...] = field(_workloads, "the workloads, `module:callable`", required=True)
    timeout: float = field(_timeout, "seconds for all workloads", default=DEFAULT_TIMEOUT)
    device: str = field(_device, "where the workloads run", default="auto")

    def dumps(self) -> str:
        data = {"format": DECLARATION_FORMAT, "package": self.package, "workloads": list(self.workloads),
                "timeout": self.timeout, "device": self.device}
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def parse(cls, text: str) -> "Declaration | None":
        """The declaration in ``text``, or None when it is not one this version reads."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("format") != DECLARATION_FORMAT:
            return None
        try:
            return fields.parse(cls, data)
        except _Unreadable:
            return None
