"""The child's side: run workloads one after another, tell the parent what happens, write the result.

Progress goes to stdout as marked events, one JSON object a line (``emit``); the result is one
typed ``protocol.ChildResult`` in the spec's ``out`` dir. This very hatch_precompile is imported
first (runner.start), then its dir is taken off ``sys.path`` again so that it shadows nothing the
workload imports.
"""

from __future__ import annotations

import importlib
import json
import traceback
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.protocol import ChildResult, Failure

EVENT_MARK = "@@hatch-precompile@@ "
RESULT_FILE = "result.json"


def emit(event: str, **fields: Any) -> None:
    """Tell the parent, on stdout, that something happened (``start``, ``done``, ``note``)."""
    print(EVENT_MARK + json.dumps({"event": event, **fields}), flush=True)


def parse_event(line: str) -> dict[str, Any] | None:
    return json.loads(line[len(EVENT_MARK):]) if line.startswith(EVENT_MARK) else None


def resolve(spec: str) -> Callable[[], Any]:
    """The callable a ``module:attr.path`` workload string names (imports the module)."""
    module_name, _, attr_path = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        obj = getattr(obj, attr)
    if not callable(obj):
        raise TypeError(f"{spec} is {type(obj).__name__}, not a callable")
    return obj


def run_workloads(
    names: list[str], measure: Callable[[str, Callable[[], Any]], dict[str, Any]],
    on_failure: Callable[[str, BaseException], Failure | ChildResult] | None = None,
) -> tuple[list[dict[str, Any]], Failure | ChildResult | None]:
    """Each workload in turn, measured: (what each compiled, None), or (those before, why it stopped).

    ``on_failure`` may turn a raising workload into another result (a machine that cannot
    compile is not the workload's fault); by default it is the workload's Failure.
    """
    measured: list[dict[str, Any]] = []
    for index, name in enumerate(names, 1):
        emit("start", workload=name, index=index, total=len(names))
        try:
            measured.append(measure(name, resolve(name)))
        except BaseException as exc:
            stop = on_failure(name, exc) if on_failure else None
            return measured, stop if stop is not None else failure(name, exc)
        emit("done", **measured[-1])
    return measured, None


def failure(workload: str, exc: BaseException) -> Failure:
    """The record of a workload that raised: its traceback and the module a failed import missed."""
    return Failure(workload, traceback.format_exc(), missing_module(exc))


def missing_module(exc: BaseException | None) -> str | None:
    """The module a failed import looked for, also when the workload wrapped that error."""
    for link in causes(exc):
        if isinstance(link, ModuleNotFoundError) and link.name:
            return link.name
    return None


def causes(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and what it was raised from or during, each once."""
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def write_result(out: Path, result: ChildResult) -> None:
    (out / RESULT_FILE).write_text(result.dumps())
