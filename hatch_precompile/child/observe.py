"""What a workload compiled, observed from inside the process that runs it.

Shared by the build's child (child/build_child.py), ``verify``'s (child/verify_child.py) and ``snoop``'s
(child/snoop_child.py): per workload,
torch's counters, each graph compiled with its seconds and source location (compilation
metrics), recompiles, kernels built, bytes of cache and what each cache key was made of
(child/key_details.py); in the build also graph breaks and
float64 nodes, read from torch's logs, and each CPU kernel's compiler command (for relocation).
All of it is observation only: an observer that breaks records less, never fails the workload.
"""

from __future__ import annotations

import ast
import logging
import os
import re
import time
from typing import Any, Callable

from hatch_precompile.child import key_details, progress, unused_entries
from hatch_precompile.run.torch_internals import patching

log = logging.getLogger("hatch_precompile.observe")


class Observer:
    """Measures workloads one after another in this process (torch already imported)."""

    def __init__(self, cache_dir: str | None, logs: bool, lines: bool = False) -> None:
        import torch
        import torch._dynamo.utils as dynamo_utils

        self.cache_dir = cache_dir
        self.dynamo_utils = dynamo_utils
        self.signatures = Signatures()
        self.keys = key_details.KeyRecorder()
        self.lookups = unused_entries.Lookups()
        self.logs = None
        if logs:
            try:
                self.logs = LogRecorder.install(torch)
            except Exception:  # torch's logging API moved: no graph breaks or float64 in the report
                log.debug("observer: no graph breaks or float64 recorded", exc_info=True)
        _call(dynamo_utils, "set_compilation_metrics_limit", 1_000_000)  # torch keeps 64 by default
        # A line per graph as it is compiled (child/progress.py), where the parent shows progress.
        self.lines = progress.CompileLines(dynamo_utils, lambda: cache_usage(cache_dir)[0]) if lines else None

    def measure(self, name: str, run: Callable[[], Any]) -> dict[str, Any]:
        """Run ``run`` and return what it compiled; its exceptions propagate."""
        counters = getattr(self.dynamo_utils, "counters", {})
        guard_failures = getattr(self.dynamo_utils, "guard_failures", {})
        before = snapshot(counters)
        breaks_before = len(self.logs.breaks) if self.logs else 0
        float64_before = dict(self.logs.float64) if self.logs else {}
        kernels_before, bytes_before = cache_usage(self.cache_dir)
        _call(guard_failures, "clear")
        if self.lines is not None:
            self.lines.restart()
        _call(self.dynamo_utils, "clear_compilation_metrics")
        started = time.perf_counter()
        run()
        seconds = time.perf_counter() - started
        if self.lines is not None:
            self.lines.flush()
        kernels_after, bytes_after = cache_usage(self.cache_dir)
        keys = self.keys.take()
        graphs = compiled_graphs(self.dynamo_utils, self.signatures.by_id)
        failed, saved = self.lookups.take()
        attach_guards(keys, saved)
        record: dict[str, Any] = {
            "name": name,
            "seconds": round(seconds, 3),
            "counters": delta(before, snapshot(counters)),
            "recompiles": recompiles(guard_failures),
            "graphs": graphs,
            "kernels": kernels_after - kernels_before,
            "cache_bytes": bytes_after - bytes_before,
            "keys": keys,
            "guard_failures": failed,
            "unloadable": unloadable_entries(graphs, keys, failed),
        }
        if self.logs is not None:
            record["graph_breaks"] = self.logs.breaks[breaks_before:]
            record["float64"] = self.logs.float64_since(float64_before)
        return record


def attach_guards(keys: list[dict[str, Any]], saved: list[dict[str, Any]]) -> None:
    """Each guard expression saved with an entry, with the values it was saved for, on the key
    entries of its compile (the build ships them: ``why`` sets them beside a failed guard's)."""
    for guard in saved:
        for entry in keys:
            saved_here = {"expr": guard["expr"], "values": guard["values"]}
            if (entry.get("compile_id") == guard["compile_id"] and entry.get("cache") in ("aot", "fx")
                    and saved_here not in entry.get("guards", [])):
                entry.setdefault("guards", []).append(saved_here)


def unloadable_entries(graphs: list[dict[str, Any]], keys: list[dict[str, Any]],
                       failed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each forward graph whose AOTAutograd lookup missed with no guard failed, why the entry
    under its key could not be used (child/unused_entries.py): a file that cannot be loaded, an FX graph
    entry it names that is missing, or no entry at all."""
    guarded = {g["compile_id"] for g in failed}
    out = []
    for graph in graphs:
        compile_id = graph.get("compile_id")
        if graph.get("kind") != "forward" or not graph.get("aot_misses") or compile_id in guarded:
            continue
        for key in {e["key"] for e in keys if e.get("cache") == "aot" and e.get("compile_id") == compile_id
                    and e.get("key")}:
            try:
                problem = unused_entries.unloadable(key)
            except Exception:  # an observer must never fail the run it observes
                log.debug("observer: the entry under %s not read back", key, exc_info=True)
                continue
            if problem is not None:
                out.append({"compile_id": compile_id, "key": key, **problem})
    return out


def _call(obj: Any, method: str, *args: Any) -> None:
    try:
        getattr(obj, method)(*args)
    except Exception:  # torch's observability API is internal: do without
        log.debug("observer: a call of torch's observability API failed", exc_info=True)


# The C++ sources whose binary Inductor builds next to them, by torch version: `<key>.cpp` ->
# `<key>.so` (torch 2.7), `<key>.main.cpp` -> `<key>.main.so` (2.8 and later).
KERNEL_SOURCES = ("cpp", "main.cpp")


def record_kernel_commands() -> dict[str, tuple[str, str]]:
    """Each CPU kernel's (source extension, hashed compiler command), by its key (run/caches/relocate.py)."""
    recorded: dict[str, tuple[str, str]] = {}

    def note(arguments: dict[str, Any], result: Any) -> None:
        extension, extra = arguments.get("extension"), arguments.get("extra")
        if (
            extension in KERNEL_SOURCES
            and arguments.get("hash_type", "code") == "code"
            and not arguments.get("specified_dir")
            and arguments.get("key") is None
            and isinstance(extra, str)
            and isinstance(result[0], str)
        ):
            recorded[result[0]] = (extension, extra)

    patching.wrap("write", after=note)
    return recorded


def snapshot(counters: Any) -> dict[str, dict[str, int]]:
    """torch's counters (``torch._dynamo.utils.counters``) as plain dicts; {} if unreadable."""
    try:
        return {str(group): {str(k): int(v) for k, v in c.items()} for group, c in counters.items()}
    except Exception:
        return {}


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


class LogRecorder(logging.Handler):
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
            log.debug("observer: a log record not read", exc_info=True)

    def _graph_break(self, message: str) -> None:
        lines = message.splitlines()
        location = lines[0].rpartition(" at ")[2] if lines else "?"
        explanation = next((line.strip() for line in lines if line.strip().startswith("Explanation:")), None)
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
    def install(cls, torch: Any) -> "LogRecorder":
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


class Signatures:
    """Each compiled frame's call, by compile id: its tensor arguments' shapes, dtypes and
    requires_grad, and the grad mode. Dynamo's ``_compile`` sees the frame's locals; the wrapper
    only looks at them and passes every call through."""

    def __init__(self) -> None:
        self.by_id: dict[str, dict[str, Any]] = {}
        patching.wrap("dynamo-compile", before=self._note)

    def _note(self, arguments: dict[str, Any]) -> None:
        import torch

        frame_locals = arguments.get("locals") or {}
        self.by_id[str(arguments.get("compile_id"))] = {
            "tensors": {
                name: {"dtype": str(value.dtype), "requires_grad": bool(value.requires_grad)}
                for name, value in frame_locals.items() if isinstance(value, torch.Tensor)
            },
            "grad_mode": torch.is_grad_enabled(),
        }


def compiled_graphs(dynamo_utils: Any, signatures: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One entry per graph compiled since the last clear, from torch's compilation metrics.

    A backward graph is compiled separately and has no frame of its own: it is given its
    forward's function and location. A forward graph gets its inputs (shapes from the metrics,
    a symbol for each dim Dynamo made dynamic; dtypes from ``signatures``) and grad mode.
    """
    graphs: list[dict[str, Any]] = []
    try:
        _collect_graphs(dynamo_utils.get_compilation_metrics(), graphs, signatures or {})
    except Exception:  # torch's metrics are internal API: observe what we can, never fail
        log.debug("observer: compilation metrics not read", exc_info=True)
    return graphs


def graph_inputs(node_shapes: Any, signature: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """The user-level tensor inputs of a graph: ``{name, shape, dtype, requires_grad}``."""
    try:
        shapes = ast.literal_eval(node_shapes) if isinstance(node_shapes, str) else node_shapes
    except (ValueError, SyntaxError):
        return None
    if not isinstance(shapes, dict):
        return None
    tensors = (signature or {}).get("tensors")
    if tensors is None:  # no signature: Dynamo's names for the frame's locals (l_<name>_), no dtypes
        tensors = {k[2:-1]: {} for k in shapes if k.startswith("l_") and k.endswith("_") and "_modules_" not in k}
    inputs = []
    for name, info in tensors.items():
        shape = shapes.get(f"l_{name}_")
        if isinstance(shape, list):
            inputs.append({"name": name, "shape": shape, "dtype": info.get("dtype"),
                           "requires_grad": info.get("requires_grad")})
    return inputs


def _collect_graphs(metrics: Any, graphs: list[dict[str, Any]], signatures: dict[str, dict[str, Any]]) -> None:
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
            entry["restart_seconds"] = round(getattr(m, "dynamo_time_before_restart_s", None) or 0.0, 3)
            entry["restart_reasons"] = sorted(str(r) for r in getattr(m, "restart_reasons", None) or ())
            signature = signatures.get(str(entry["compile_id"]))
            entry["inputs"] = graph_inputs(getattr(m, "graph_node_shapes", None), signature)
            entry["grad_mode"] = signature.get("grad_mode") if signature else None
            frames[str(entry["compile_id"])] = entry
        elif str(entry["compile_id"]) in frames:
            entry["function"] = frames[str(entry["compile_id"])]["function"]
            entry["location"] = frames[str(entry["compile_id"])]["location"]
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
    try:
        for code, reasons in guard_failures.items():
            if reasons:
                out.append(
                    {
                        "function": getattr(code, "co_name", str(code)),
                        "location": f"{getattr(code, 'co_filename', '?')}:{getattr(code, 'co_firstlineno', '?')}",
                        "reasons": [str(r) for r in reasons],
                    }
                )
    except Exception:  # Dynamo's bookkeeping is internal: report what was read
        log.debug("observer: recompiles not read", exc_info=True)
    return out
