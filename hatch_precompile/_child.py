"""The build-time child process: runs the workloads and saves what compiling produced.

Started by the build hook as ``python -m hatch_precompile._child SPEC.json`` with a fresh,
private ``TORCHINDUCTOR_CACHE_DIR``. Writes into the spec's ``out`` dir: ``result.json``,
``megacache.bin`` and ``torchscript/``; the hook itself copies the cache dir. Progress goes to
stdout as marked JSON lines so the parent can tell which workload is running.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

EVENT_MARK = "@@hatch-precompile@@ "
BUILDING_VAR = "HATCH_PRECOMPILE_BUILDING"
TORCHSCRIPT_DIR_VAR = "HATCH_PRECOMPILE_TORCHSCRIPT_DIR"
EXIT_WORKLOAD_FAILED = 3


def emit(event: str, **fields: Any) -> None:
    print(EVENT_MARK + json.dumps({"event": event, **fields}), flush=True)


def resolve(spec: str) -> Callable[[], Any]:
    module_name, _, attr_path = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        obj = getattr(obj, attr)
    if not callable(obj):
        raise TypeError(f"{spec} is {type(obj).__name__}, not a callable")
    return obj


def snapshot(counters: Any) -> dict[str, dict[str, int]]:
    return {group: {str(k): int(v) for k, v in c.items()} for group, c in counters.items()}


def delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for group, values in after.items():
        changed = {
            k: v - before.get(group, {}).get(k, 0)
            for k, v in values.items()
            if v != before.get(group, {}).get(k, 0)
        }
        if changed:
            out[group] = changed
    return out


def record_kernel_commands(codecache: Any) -> dict[str, str]:
    """Record the hashed command line of every CPU pybinding kernel (see kernels.py)."""
    recorded: dict[str, str] = {}
    original = codecache.write

    def write(content, extension, extra="", hash_type="code", specified_dir="", key=None):
        basename, path = original(content, extension, extra, hash_type, specified_dir, key)
        if extension == "main.cpp" and hash_type == "code" and not specified_dir and key is None:
            recorded[basename] = extra
        return basename, path

    codecache.write = write
    return recorded


class GraphBreakRecorder(logging.Handler):
    """Collects Dynamo's graph-break reports (with user source locations) instead of printing them."""

    SUFFIX = "__graph_breaks"

    def __init__(self) -> None:
        super().__init__()
        self.breaks: list[dict[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.endswith(self.SUFFIX):
            return
        lines = record.getMessage().splitlines()
        location = lines[0].rpartition(" at ")[2] if lines else "?"
        explanation = next((l.strip() for l in lines if l.strip().startswith("Explanation:")), None)
        reason = explanation or (lines[1] if len(lines) > 1 else "")
        self.breaks.append({"location": location, "reason": reason.removeprefix("Explanation: ")})

    @classmethod
    def install(cls, torch: Any) -> "GraphBreakRecorder":
        torch._logging.set_logs(graph_breaks=True)
        recorder = cls()
        # set_logs gives several torch loggers (torch, torch._dynamo, ...) their own stderr
        # handler and stops propagation there: listen on each, and keep them from printing.
        names = ["torch"] + [n for n in logging.root.manager.loggerDict if n.startswith("torch.")]
        for name in names:
            logger = logging.getLogger(name)
            if logger.handlers:
                for handler in logger.handlers:
                    handler.addFilter(lambda record: not record.name.endswith(cls.SUFFIX))
                logger.addHandler(recorder)
        return recorder


def recompiles(guard_failures: Any) -> list[dict[str, Any]]:
    """Dynamo's recompilation reasons, per compiled function, with its source location."""
    out = []
    for code, reasons in guard_failures.items():
        if reasons:
            out.append(
                {
                    "function": getattr(code, "co_name", str(code)),
                    "location": f"{getattr(code, 'co_filename', '?')}:{getattr(code, 'co_firstlineno', '?')}",
                    "reasons": [str(r) for r in reasons],
                }
            )
    return out


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    out = Path(spec["out"])
    sys.path[:0] = spec["paths"]
    os.environ[BUILDING_VAR] = "1"
    os.environ[TORCHSCRIPT_DIR_VAR] = str(out / "torchscript")

    started = time.perf_counter()
    import torch
    import torch._dynamo  # torch 2.7.0 saved no Mega-Cache unless dynamo was imported first
    import torch._inductor.codecache as codecache
    from torch._dynamo.utils import compile_times, counters, guard_failures

    kernel_commands = record_kernel_commands(codecache)
    graph_breaks = GraphBreakRecorder.install(torch)
    import_seconds = time.perf_counter() - started

    workloads = []
    for name in spec["workloads"]:
        emit("start", workload=name)
        before = snapshot(counters)
        breaks_before = len(graph_breaks.breaks)
        guard_failures.clear()
        t0 = time.perf_counter()
        try:
            resolve(name)()
        except BaseException:
            result = {"error": {"workload": name, "traceback": traceback.format_exc()}}
            (out / "result.json").write_text(json.dumps(result))
            emit("failed", workload=name)
            return EXIT_WORKLOAD_FAILED
        seconds = time.perf_counter() - t0
        counts = delta(before, snapshot(counters))
        workloads.append(
            {
                "name": name,
                "seconds": round(seconds, 3),
                "counters": counts,
                "graph_breaks": graph_breaks.breaks[breaks_before:],
                "recompiles": recompiles(guard_failures),
            }
        )
        emit("done", **workloads[-1])

    saved = torch.compiler.save_cache_artifacts()
    megacache = None
    if saved is not None and saved[0]:
        (out / "megacache.bin").write_bytes(saved[0])
        megacache = {k: list(v) for k, v in saved[1].artifacts.items()}

    from hatch_precompile import envkey, kernels

    values = kernels.path_values(os.path.dirname(torch.__file__))
    result = {
        "env": envkey.current(torch),
        "python_full": sys.version.split()[0],
        "inductor_vec_isa": _vec_isa(),
        "import_seconds": round(import_seconds, 3),
        "workloads": workloads,
        "megacache": megacache,
        "compile_times": compile_times(repr="str", aggregate=True),
        "kernel_commands": {
            key: kernels.to_template(command, values) for key, command in kernel_commands.items()
        },
        "path_values": values,
    }
    (out / "result.json").write_text(json.dumps(result))
    return 0


def _vec_isa() -> str:
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    return str(pick_vec_isa())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
