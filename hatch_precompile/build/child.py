"""A child Python that runs workloads, seen from both ends: starting it, and talking back.

The build (capture.py -> worker.py) and ``verify`` (tools/verify.py -> tools/replay.py) both run
the package's workloads in a fresh process: another Python may run them (target.py), a timeout
must kill everything they started, and this very hatch_precompile must be the one imported.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import traceback
from pathlib import Path
from typing import Any, Callable

EVENT_MARK = "@@hatch-precompile@@ "
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def start(python: str, entry: str, spec_path: Path, env: dict[str, str], **popen: Any) -> subprocess.Popen:
    """Start ``python`` running ``entry``'s ``main(argv)`` with ``spec_path``, in its own process group."""
    code = (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); "
        f"from {entry} import main; "
        # This very hatch_precompile, then that dir off the front again: it must not shadow the
        # packages the workload imports (e.g. an unpacked wheel on PYTHONPATH).
        "sys.path.pop(0); sys.exit(main(sys.argv))"
    )
    return subprocess.Popen(
        [python, "-c", code, _PACKAGE_PARENT, str(spec_path)],
        env=env, stdin=subprocess.DEVNULL,
        start_new_session=True,  # one process group, so a timeout kills every grandchild too
        **popen,
    )


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


# -- in the child ---------------------------------------------------------------------------------


def emit(event: str, **fields: Any) -> None:
    """Tell the parent, on stdout, that something happened (``start``, ``done``, ``failed``)."""
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


def failure(workload: str, exc: BaseException) -> dict[str, Any]:
    """The error record of a workload that raised: its traceback and the module it missed."""
    return {"workload": workload, "traceback": traceback.format_exc(), "missing_module": _missing_module(exc)}


def _missing_module(exc: BaseException | None) -> str | None:
    """The module a failed import looked for, also when the workload wrapped that error."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            return exc.name
        exc = exc.__cause__ or exc.__context__
    return None


def write_result(out: Path, result: dict[str, Any]) -> None:
    (out / "result.json").write_text(json.dumps(result))


def read_result(out: Path) -> dict[str, Any]:
    path = out / "result.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
