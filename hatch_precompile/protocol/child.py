"""``result.json``: what a child process (a build's, ``verify``'s or ``snoop``'s) reports."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hatch_precompile.errors import ChildResultError
from hatch_precompile.protocol import fields
from hatch_precompile.protocol.fields import field, mapping, records

CHILD_FORMAT = 1
# "ok": the job ran; "failed": a workload raised (``failure``); the others: nothing was run, and
# ``detail`` says why: this torch cannot make trustworthy artifacts ("unusable"), this machine
# cannot run the asked CPU capability ("skipped"), has no usable GPU ("no_gpu") or cannot build
# C++ kernels ("cannot_compile").
CHILD_STATUSES = ("ok", "failed", "unusable", "skipped", "no_gpu", "cannot_compile")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclasses.dataclass(frozen=True)
class Failure:
    """A workload that raised, in the child."""

    workload: str = field(str, "the workload (or step of the job) that raised", required=True)
    traceback: str = field(str, "its traceback", required=True)
    missing_module: str | None = field(_text, "the module a failed import did not find", default=None)
    no_gpu: str | None = field(_text, "why the machine has no usable GPU, when the workload needed one", default=None)


def _status(value: Any) -> str:
    if value not in CHILD_STATUSES:
        raise ChildResultError("result.json is not a result of this hatch-precompile")
    return value


def _failure(value: Any) -> Failure | None:
    return fields.parse(Failure, value) if isinstance(value, dict) else None


@dataclasses.dataclass(frozen=True)
class ChildResult:
    """``result.json``: what a build's, ``verify``'s or ``snoop``'s child process reports."""

    status: str = field(_status, f"one of {', '.join(CHILD_STATUSES)}", required=True)
    detail: str | None = field(_text, "why nothing was run, for a status other than ok and failed", default=None)
    failure: Failure | None = field(_failure, "the workload that raised", default=None)
    workloads: list[dict[str, Any]] = field(records, "what each workload compiled, in order", factory=list)
    data: dict[str, Any] = field(mapping, "the job's own report", factory=dict)
    format: int = field(int, f"{CHILD_FORMAT}", default=CHILD_FORMAT)

    def dumps(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def parse(cls, text: str) -> "ChildResult":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ChildResultError(f"result.json does not parse: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != CHILD_FORMAT:
            raise ChildResultError("result.json is not a result of this hatch-precompile")
        return fields.parse(cls, data)
