"""The build-time child process: runs the workloads and saves what compiling produced.

Started by the build hook as ``python -m hatch_precompile._child SPEC.json`` with a fresh,
private ``TORCHINDUCTOR_CACHE_DIR``. Writes into the spec's ``out`` dir: ``result.json``,
``megacache.bin`` and ``torchscript/``; the hook itself copies the cache dir. Progress goes to
stdout as marked JSON lines so the parent can tell which workload is running.

Per workload it records what ``hatch-precompile report`` shows: torch's counters, each graph
compiled with its compile seconds and source location (torch's compilation metrics), graph
breaks, recompiles, float64 nodes in the compiled graphs, kernels built and bytes of cache. All of
it is observation only, and a failure to observe never fails the build.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
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
    """Collects two of torch's log artifacts instead of printing them.

    ``graph_breaks``: Dynamo's graph-break reports, with the user's source location.
    ``post_grad_graphs``: the FX graph Inductor compiles, as text with each node's dtype and the
    user's source line; nodes computing float64 are recorded (a silent slowdown). Logging is
    read-only: unlike a custom pass or backend it does not change what is compiled or any cache
    key. It runs only when a graph is really compiled, which at build time (empty cache dir) is
    every graph.
    """

    SUFFIX = "__graph_breaks"
    GRAPHS_SUFFIX = "__post_grad_graphs"
    _FILE = re.compile(r"#\s*File:\s*(?P<file>.+?):(?P<line>\d+) in (?P<function>[^,]+)")
    _F64_NODE = re.compile(r'^\s*\w+: "f64\[[^"]*" = (?P<expr>.+)$')
    _ANSI = re.compile(r"\x1b\[[0-9;]*m")

    def __init__(self) -> None:
        super().__init__()
        self.breaks: list[dict[str, str]] = []
        self.float64: dict[tuple[str, str, str, str], int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if record.name.endswith(self.SUFFIX):
                self._graph_break(record.getMessage())
            elif record.name.endswith(self.GRAPHS_SUFFIX):
                self._float64_nodes(record.getMessage())
        except Exception:  # a report must never break the build it reports on
            pass

    def _graph_break(self, message: str) -> None:
        lines = message.splitlines()
        location = lines[0].rpartition(" at ")[2] if lines else "?"
        explanation = next((l.strip() for l in lines if l.strip().startswith("Explanation:")), None)
        reason = explanation or (lines[1] if len(lines) > 1 else "")
        self.breaks.append({"location": location, "reason": reason.removeprefix("Explanation: ")})

    def _float64_nodes(self, message: str) -> None:
        compile_id = str(_current_compile_id())
        where, function = "?", "?"
        for line in self._ANSI.sub("", message).splitlines():
            found = self._FILE.search(line)
            if found:
                where, function = f"{found['file']}:{found['line']}", found["function"].strip()
                continue
            node = self._F64_NODE.match(line)
            if node:
                expr = node["expr"]
                op = expr.split("(", 1)[0].removeprefix("torch.ops.") if "(" in expr else "getitem"
                key = (compile_id, where, function, op)
                self.float64[key] = self.float64.get(key, 0) + 1

    def float64_since(self, mark: dict[tuple[str, str, str, str], int]) -> list[dict[str, Any]]:
        """float64 nodes recorded since ``mark``, one entry per graph and source line."""
        grouped: dict[tuple[str, str, str], dict[str, Any]] = {}
        for (compile_id, location, function, op), count in self.float64.items():
            new = count - mark.get((compile_id, location, function, op), 0)
            if new > 0:
                entry = grouped.setdefault(
                    (compile_id, location, function),
                    {"compile_id": compile_id, "location": location, "function": function, "nodes": 0, "ops": {}},
                )
                entry["nodes"] += new
                entry["ops"][op] = entry["ops"].get(op, 0) + new
        return list(grouped.values())

    @classmethod
    def install(cls, torch: Any) -> "GraphBreakRecorder":
        torch._logging.set_logs(graph_breaks=True, post_grad_graphs=True)
        recorder = cls()
        quiet = (cls.SUFFIX, cls.GRAPHS_SUFFIX)
        # set_logs gives several torch loggers (torch, torch._dynamo, ...) their own stderr
        # handler and stops propagation there: listen on each, and keep them from printing.
        names = ["torch"] + [n for n in logging.root.manager.loggerDict if n.startswith("torch.")]
        for name in names:
            logger = logging.getLogger(name)
            if logger.handlers:
                for handler in logger.handlers:
                    handler.addFilter(lambda record: not record.name.endswith(quiet))
                logger.addHandler(recorder)
        return recorder


def _current_compile_id() -> Any:
    try:
        from torch._guards import CompileContext

        return CompileContext.current_compile_id()
    except Exception:
        return None


def compiled_graphs(dynamo_utils: Any) -> list[dict[str, Any]]:
    """One entry per graph compiled since the last clear, from torch's compilation metrics.

    A backward graph is compiled separately and has no frame of its own: it is given its
    forward's function and location.
    """
    graphs: list[dict[str, Any]] = []
    try:
        _collect_graphs(dynamo_utils.get_compilation_metrics(), graphs)
    except Exception:  # torch's metrics are internal API: observe what we can, never fail
        pass
    return graphs


def _collect_graphs(metrics: Any, graphs: list[dict[str, Any]]) -> None:
    frames: dict[str, dict[str, Any]] = {}
    for m in metrics:
        if getattr(m, "is_runtime", False):
            continue
        backward = getattr(m, "is_forward", True) is False
        seconds = getattr(m, "entire_frame_compile_time_s", None)
        if seconds is None:
            seconds = (getattr(m, "duration_us", None) or 0) / 1e6
        filename = getattr(m, "co_filename", None)
        entry = {
            "compile_id": str(getattr(m, "compile_id", None)),
            "kind": "backward" if backward else "forward",
            "function": getattr(m, "co_name", None),
            "location": f"{filename}:{getattr(m, 'co_firstlineno', '?')}" if filename else None,
            "seconds": round(seconds, 3),
            "inductor_seconds": getattr(m, "inductor_compile_time_s", None),
            "ops": getattr(m, "graph_op_count", None),
            "recompile_reason": getattr(m, "recompile_reason", None),
            "fail_reason": getattr(m, "fail_reason", None),
            "aot_hits": getattr(m, "aotautograd_local_cache_hit_count", 0) or 0,
            "aot_misses": getattr(m, "aotautograd_local_cache_miss_count", 0) or 0,
            "fx_hits": getattr(m, "inductor_fx_local_cache_hit_count", 0) or 0,
            "fx_misses": getattr(m, "inductor_fx_local_cache_miss_count", 0) or 0,
        }
        if not backward:
            frames[entry["compile_id"]] = entry
        elif entry["compile_id"] in frames:
            entry["function"] = frames[entry["compile_id"]]["function"]
            entry["location"] = frames[entry["compile_id"]]["location"]
        # Frames Dynamo looked at without producing a graph carry no compile work worth listing.
        if backward or entry["ops"] or entry["aot_misses"] or entry["fx_misses"] or entry["aot_hits"]:
            graphs.append(entry)


def cache_usage(cache_dir: str | None) -> tuple[int, int]:
    """(kernel binaries, bytes) in the Inductor cache dir."""
    kernels = total = 0
    if cache_dir and os.path.isdir(cache_dir):
        for dirpath, _, filenames in os.walk(cache_dir):
            for name in filenames:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_size
                except OSError:
                    continue
                kernels += name.endswith(".so")
    return kernels, total


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
    import torch._dynamo.utils as dynamo_utils
    import torch._inductor.codecache as codecache
    from torch._dynamo.utils import compile_times, counters, guard_failures

    from hatch_precompile import speedups

    speedups.apply()  # records this machine's ISA probes for the installed package's first run
    kernel_commands = record_kernel_commands(codecache)
    graph_breaks = GraphBreakRecorder.install(torch)
    _unlimited_compilation_metrics(dynamo_utils)
    import_seconds = time.perf_counter() - started
    cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")

    workloads = []
    for index, name in enumerate(spec["workloads"], 1):
        emit("start", workload=name, index=index, total=len(spec["workloads"]))
        before = snapshot(counters)
        breaks_before = len(graph_breaks.breaks)
        float64_before = dict(graph_breaks.float64)
        kernels_before, bytes_before = cache_usage(cache_dir)
        guard_failures.clear()
        _clear_compilation_metrics(dynamo_utils)
        t0 = time.perf_counter()
        try:
            resolve(name)()
        except BaseException as exc:
            error = {"workload": name, "traceback": traceback.format_exc(), "missing_module": _missing_module(exc)}
            result = {"error": error}
            (out / "result.json").write_text(json.dumps(result))
            emit("failed", workload=name)
            return EXIT_WORKLOAD_FAILED
        seconds = time.perf_counter() - t0
        counts = delta(before, snapshot(counters))
        kernels_after, bytes_after = cache_usage(cache_dir)
        workloads.append(
            {
                "name": name,
                "seconds": round(seconds, 3),
                "counters": counts,
                "graph_breaks": graph_breaks.breaks[breaks_before:],
                "recompiles": recompiles(guard_failures),
                "graphs": compiled_graphs(dynamo_utils),
                "float64": graph_breaks.float64_since(float64_before),
                "kernels": kernels_after - kernels_before,
                "cache_bytes": bytes_after - bytes_before,
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


def _missing_module(exc: BaseException) -> str | None:
    """The module a failed import looked for, also when the workload wrapped that error."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            return exc.name
        exc = exc.__cause__ or exc.__context__
    return None


def _unlimited_compilation_metrics(dynamo_utils: Any) -> None:
    try:  # torch keeps the last 64 by default; a workload may compile more graphs than that
        dynamo_utils.set_compilation_metrics_limit(1_000_000)
    except Exception:
        pass


def _clear_compilation_metrics(dynamo_utils: Any) -> None:
    try:
        dynamo_utils.clear_compilation_metrics()
    except Exception:
        pass


def _vec_isa() -> str:
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    return str(pick_vec_isa())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
