"""Build side: run the workloads in a child process and lay out ``_precompiled/``.

No torch here: the child imports it, this process only starts the child, watches it, and copies
files. Kept separate from the hatchling hook so that tools (``verify``, ``warm``) can reuse it.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from hatch_precompile import __version__, kernels, manifest
from hatch_precompile._child import EVENT_MARK, EXIT_WORKLOAD_FAILED

HEARTBEAT_SECONDS = 30.0
# A workload that runs for minutes must not look hung: one line every this many seconds.
HEARTBEAT_VAR = "HATCH_PRECOMPILE_HEARTBEAT"
# Inductor's own bookkeeping, never worth shipping: lock files and half-written temp files.
_SKIP_DIRS = {"locks"}


class WorkloadFailed(Exception):
    def __init__(self, workload: str | None, detail: str, missing_module: str | None = None) -> None:
        self.workload = workload
        self.detail = detail
        self.missing_module = missing_module  # the module a failed import did not find
        where = f"workload {workload!r}" if workload else "the precompile child process"
        super().__init__(f"{where} failed: {detail}")


def heartbeat_seconds(environ: dict[str, str] | None = None) -> float:
    raw = (os.environ if environ is None else environ).get(HEARTBEAT_VAR, "").strip()
    if not raw:
        return HEARTBEAT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{HEARTBEAT_VAR}={raw!r} must be a positive number of seconds")
    return value


def _run_child(
    python: str, spec_path: Path, env: dict[str, str], timeout: float, say: Callable[[str], None]
) -> tuple[int, str | None, str, bool]:
    """Run the child; return (exit code, workload running at the end, last output lines, timed out)."""
    heartbeat = heartbeat_seconds(env)
    package_parent = str(Path(__file__).resolve().parents[1])
    code = (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); "
        "from hatch_precompile._child import main; "
        # This very hatch_precompile, then that dir off the front again: it must not shadow the
        # packages the workload imports (e.g. an unpacked wheel on PYTHONPATH).
        "sys.path.pop(0); sys.exit(main(sys.argv))"
    )
    proc = subprocess.Popen(
        [python, "-c", code, package_parent, str(spec_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        text=True,
        errors="replace",
        start_new_session=True,  # one process group, so a timeout kills every grandchild too
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    tail: deque[str] = deque(maxlen=40)
    running: str | None = None
    started = time.monotonic()
    workload_started = started
    next_beat = started + heartbeat
    try:
        while True:
            now = time.monotonic()
            if now - started > timeout:
                _kill_group(proc)
                tail.append(f"killed after the {timeout:g} s timeout")
                return -signal.SIGKILL, running, "\n".join(tail), True
            try:
                line = lines.get(timeout=min(1.0, max(0.05, next_beat - now)))
            except queue.Empty:
                if time.monotonic() >= next_beat and running:
                    say(
                        f"precompile: workload {running} still running "
                        f"({time.monotonic() - workload_started:.0f} s)"
                    )
                    next_beat = time.monotonic() + heartbeat
                continue
            if line is None:
                break
            if line.startswith(EVENT_MARK):
                event = json.loads(line[len(EVENT_MARK):])
                if event["event"] == "start":
                    running = event["workload"]
                    workload_started = time.monotonic()
                    next_beat = workload_started + heartbeat
                    of = f" ({event['index']}/{event['total']})" if event.get("total", 1) > 1 else ""
                    say(f"precompile: running workload {running}{of}")
                elif event["event"] == "done":
                    _say_done(event, say)
                    running = None
                continue
            tail.append(line)
            say(f"  | {line}")
        return proc.wait(), running, "\n".join(tail), False
    finally:
        if proc.poll() is None:
            _kill_group(proc)


def _say_done(workload: dict[str, Any], say: Callable[[str], None]) -> None:
    breaks, recompiled = workload["graph_breaks"], workload["recompiles"]
    graphs = workload["counters"].get("stats", {}).get("unique_graphs", 0)
    float64 = sum(item["nodes"] for item in workload.get("float64", []))
    say(
        f"precompile: workload {workload['name']} finished in {workload['seconds']:.1f} s: "
        f"{graphs} graph(s), {len(breaks)} graph break(s), "
        f"{sum(len(r['reasons']) for r in recompiled)} recompile(s), "
        f"{workload.get('kernels', 0)} kernel(s), {workload.get('cache_bytes', 0) / 1e6:.2f} MB"
        + (f", {float64} float64 node(s)" if float64 else "")
    )
    for item in breaks:
        say(f"  graph break at {item['location']}: {item['reason']}")
    for item in recompiled:
        for reason in item["reasons"]:
            say(f"  recompiled {item['function']} ({item['location']}): {reason}")
    for item in workload.get("float64", []):
        say(
            f"  float64 computed in a compiled graph at {item['location']} ({item['function']}): "
            f"{item['nodes']} node(s): {', '.join(item['ops'])}"
        )


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _copy_cache(cache_dir: Path, dest: Path) -> int:
    copied = 0
    for path in sorted(cache_dir.rglob("*")):
        rel = path.relative_to(cache_dir)
        if rel.parts[0] in _SKIP_DIRS or path.name.endswith(".tmp") or path.is_symlink():
            continue
        if path.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            copied += 1
    return copied


def _relocatable_kernels(
    inductor_dir: Path, commands: dict[str, str], values: dict[str, str]
) -> tuple[list[dict[str, Any]], int]:
    """Kernel entries whose key our mirror of Inductor's hash reproduces (see kernels.py)."""
    entries, unverified = [], 0
    for key, template in sorted(commands.items()):
        source = inductor_dir / kernels.cache_relpath(key, ".main.cpp")
        if not (source.is_file() and (inductor_dir / kernels.cache_relpath(key, ".main.so")).is_file()):
            continue
        if kernels.code_key(source.read_text(), kernels.render(template, values)) != key:
            unverified += 1
            continue
        group = sorted(source.parent.glob(key + ".*"))
        entries.append(
            {
                "key": key,
                "command": template,
                "source": f"{manifest.INDUCTOR_DIR}/{kernels.cache_relpath(key, '.main.cpp')}",
                "files": [f"{manifest.INDUCTOR_DIR}/{p.relative_to(inductor_dir).as_posix()}" for p in group],
            }
        )
    return entries, unverified


def capture(
    *,
    root: Path | None,
    work_dir: Path,
    package: str,
    workloads: list[str],
    timeout: float,
    say: Callable[[str], None],
    python: str = sys.executable,
    environ: dict[str, str] | None = None,
) -> Path | None:
    """Run ``workloads`` and build ``work_dir/_precompiled``; return it, or None if nothing compiled.

    ``root`` is the project dir put first on the child's ``sys.path`` (None: the package is
    already importable, as for ``hatch-precompile warm``). ``python`` and ``environ`` are the
    child's interpreter and environment (another environment's, see target.py). Raises
    WorkloadFailed on a raising, crashing or timed-out workload.
    """
    started = time.perf_counter()
    cache_dir = work_dir / "inductor-cache"
    out_dir = work_dir / "child-out"
    cache_dir.mkdir(parents=True)
    out_dir.mkdir()
    paths = [] if root is None else [str(root)] + ([str(root / "src")] if (root / "src").is_dir() else [])
    spec_path = work_dir / "spec.json"
    spec_path.write_text(json.dumps({"workloads": workloads, "out": str(out_dir), "paths": paths}))
    env = dict(os.environ if environ is None else environ, TORCHINDUCTOR_CACHE_DIR=str(cache_dir))

    code, running, tail, timed_out = _run_child(python, spec_path, env, timeout, say)
    result_path = out_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    if code == EXIT_WORKLOAD_FAILED and "error" in result:
        error = result["error"]
        raise WorkloadFailed(error["workload"], "\n" + error["traceback"], error.get("missing_module"))
    if timed_out:  # also while torch was still importing, before the first workload started
        raise WorkloadFailed(running, f"timed out after {timeout:g} s (the `timeout` option)")
    if code != 0 or "env" not in result:
        raise WorkloadFailed(running, f"the child process exited with code {code}; its last output:\n{tail}")

    target = work_dir / manifest.DIRNAME
    copied = _copy_cache(cache_dir, target / manifest.INDUCTOR_DIR)
    compiled = any(
        (target / manifest.INDUCTOR_DIR / kind).is_dir() for kind in ("aotautograd", "fxgraph")
    )
    torchscript_dir = out_dir / manifest.TORCHSCRIPT_DIR
    scripted = sorted(torchscript_dir.glob("*.pt")) if torchscript_dir.is_dir() else []
    if not compiled and not scripted:
        shutil.rmtree(target, ignore_errors=True)
        return None
    if (out_dir / manifest.MEGACACHE_FILE).is_file():
        shutil.copy2(out_dir / manifest.MEGACACHE_FILE, target / manifest.MEGACACHE_FILE)
    if scripted:
        shutil.copytree(torchscript_dir, target / manifest.TORCHSCRIPT_DIR)

    kernel_entries, unverified = _relocatable_kernels(
        target / manifest.INDUCTOR_DIR, result["kernel_commands"], result["path_values"]
    )
    if unverified:
        say(
            f"precompile: {unverified} kernel(s) are not relocatable with this torch; they hit "
            "only where torch is installed at the same path as in this build"
        )
    files = manifest.describe_files(target)
    data = {
        "format": manifest.FORMAT,
        "generator": f"hatch-precompile {__version__}",
        "package": package,
        "env": result["env"],
        "python_full": result["python_full"],
        "inductor_vec_isa": result["inductor_vec_isa"],
        "files": files,
        "kernels": kernel_entries,
        "megacache": {"file": manifest.MEGACACHE_FILE, "artifacts": result["megacache"]}
        if result["megacache"]
        else None,
        "torchscript": {p.stem: f"{manifest.TORCHSCRIPT_DIR}/{p.name}" for p in scripted},
        "workloads": result["workloads"],
        "compile_times": result["compile_times"],
        "timings": {
            "torch_import_seconds": result["import_seconds"],
            "total_seconds": round(time.perf_counter() - started, 3),
        },
        "cache_files_copied": copied,
    }
    manifest.write(target, data)
    return target
