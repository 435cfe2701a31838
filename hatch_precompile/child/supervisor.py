"""The parent's side: start a child job, watch it, read its typed result.

One policy for every job: the child runs in its own process group (a timeout or an interrupt
kills everything it started), its output is relayed line by line while its progress events
become lines of the caller's (a workload's start and end, each graph it compiled), a child that
says nothing for a while gets a heartbeat line naming the phase it is in (child/progress.py:
torch's import, a workload, a step's capture or proof, the saving after the workloads), and what
it reports is one ``protocol.ChildResult``. Another Python may run the job (builder/target_environment.py), and
this very hatch_precompile is the one it imports.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.child.workload_loop import RESULT_FILE, parse_event
from hatch_precompile.errors import ChildError, ChildResultError
from hatch_precompile.protocol import ChildResult
from hatch_precompile.run.variables import HEARTBEAT_SECONDS

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])

Say = Callable[[str], None]


@dataclasses.dataclass
class Job:
    """What to run and how to show it: ``entry``'s ``main(argv)`` with the spec, under ``prefix``."""

    entry: str  # the module whose main(argv) is the child: child.build_child, child.verify_child, child.snoop_child
    spec: dict[str, Any]
    prefix: str  # the caller's line prefix: "precompile", "verify", ...
    say: Say
    relay: Say  # the child's own output lines
    timeout: float | None = None
    heartbeat: float = HEARTBEAT_SECONDS
    phase: str = "importing torch"  # what the child does first, until it says otherwise
    # A temp dir of the job's own, removed with it: for a torch no one uses again (an isolated build
    # env's). False: the caller's, where torch keeps its prefix header for the next run on that torch.
    own_temp: bool = True


def run(job: Job, work: Path, python: str = sys.executable, env: dict[str, str] | None = None) -> ChildResult:
    """Run ``job`` in ``work`` (its spec and ``out/`` dir go there); its result, or ChildError."""
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps({**job.spec, "out": str(out)}))
    # Inductor builds its C++ prefix header (~150 MB, ~6 s) into a dir under the temp dir that
    # outlives every run, keyed by the torch path: for an isolated build env's random one it is
    # never used again, so such a child's temp dir is the job's, removed with it.
    env = dict(os.environ if env is None else env)
    if job.own_temp:
        temp = (work / "tmp").absolute()
        temp.mkdir(exist_ok=True)
        env["TMPDIR"] = str(temp)
    proc = start(python, job.entry, spec_path, env)
    code, running, tail, timed_out = _Watch(job).run(proc)
    if timed_out:  # also while torch was still importing, before the first workload started
        raise ChildError(running, f"timed out after {job.timeout:g} s")
    try:
        return ChildResult.parse((out / RESULT_FILE).read_text())
    except (OSError, ChildResultError):
        raise ChildError(running, f"the child process exited with code {code}; its last output:\n{tail}") from None


def command(python: str, entry: str, *args: str) -> list[str]:
    """The command line that runs ``entry``'s ``main(argv)`` (``argv[1:]`` is ``args``) under ``python``,
    from this very hatch_precompile: its dir goes first on ``sys.path`` for that one import, then off
    again. Never through ``PYTHONPATH``: where hatch_precompile is installed, its dir is a
    site-packages that holds a torch too, which would shadow ``python``'s own (another torch's
    child would import this environment's torch) and the packages the workload imports."""
    code = (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); "
        f"from {entry} import main; "
        "sys.path.pop(0); sys.exit(main(sys.argv))"
    )
    return [python, "-c", code, _PACKAGE_PARENT, *args]


def start(python: str, entry: str, spec_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start ``python`` running ``entry``'s ``main(argv)`` with ``spec_path``, in its own process group."""
    return subprocess.Popen(
        command(python, entry, str(spec_path)), env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
        start_new_session=True,  # one process group, so a timeout kills every grandchild too
    )


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


class _Watch:
    """Relays a child's output and progress events as lines, with a heartbeat and a timeout."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.running: str | None = None
        self.workload_started = self.phase_started = time.monotonic()
        self.phase = job.phase
        self.within: list[tuple[str, float]] = []  # stretches of the phase (a step's capture, its proof)
        self.tail: deque[str] = deque(maxlen=40)

    def run(self, proc: subprocess.Popen) -> tuple[int, str | None, str, bool]:
        """(exit code, workload running at the end, last output lines, timed out)."""
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
        started = time.monotonic()
        next_beat = started + self.job.heartbeat
        try:
            while True:
                now = time.monotonic()
                if self.job.timeout is not None and now - started > self.job.timeout:
                    kill_group(proc)
                    self.tail.append(f"killed after the {self.job.timeout:g} s timeout")
                    return proc.returncode, self.running, "\n".join(self.tail), True
                try:
                    line = lines.get(timeout=min(1.0, max(0.05, next_beat - now)))
                except queue.Empty:
                    if time.monotonic() >= next_beat:
                        self.job.say(self.beat())
                        next_beat = time.monotonic() + self.job.heartbeat
                    continue
                if line is None:
                    return proc.wait(), self.running, "\n".join(self.tail), False
                if self._event(line):
                    next_beat = time.monotonic() + self.job.heartbeat
        finally:
            if proc.poll() is None:  # an interrupt, or an error here: nothing may outlive the call
                kill_group(proc)

    def beat(self) -> str:
        """The heartbeat: what the child is doing, and for how long."""
        now = time.monotonic()
        if self.running:
            text = f"{self.job.prefix}: workload {self.running} still running ({now - self.workload_started:.0f} s)"
        else:
            text = f"{self.job.prefix}: still {self.phase} ({now - self.phase_started:.0f} s)"
        if self.within:
            what, since = self.within[-1]
            text += f": {what} ({now - since:.0f} s)"
        return text

    def _event(self, line: str) -> bool:
        """Show one line of the child's; True when it said a line of progress (the heartbeat restarts)."""
        event = parse_event(line)
        if event is None:
            self.tail.append(line)
            self.job.relay(line)
            return False
        say, prefix, kind = self.job.say, self.job.prefix, event["event"]
        if kind == "start":
            self.running, self.within = event["workload"], []
            self.workload_started = time.monotonic()
            of = f" ({event['index']}/{event['total']})" if event.get("total", 1) > 1 else ""
            say(f"{prefix}: running workload {self.running}{of}")
        elif kind == "done":
            say_done(event, say, prefix)
            self.running, self.within = None, []
            self._enter_phase(f"working after workload {event['name']}")
        elif kind == "compiled":
            say(compiled_line(event, prefix))
        elif kind == "note":
            say(f"{prefix}: {event['text']}")
        elif kind == "phase":
            self.running, self.within = None, []
            self._enter_phase(event["phase"])
            return False
        elif kind == "enter":
            self.within.append((event["what"], time.monotonic()))
            return False
        elif kind == "leave":
            self.within = [(what, since) for what, since in self.within if what != event["what"]]
            return False
        return True

    def _enter_phase(self, phase: str) -> None:
        self.phase, self.phase_started = phase, time.monotonic()


def _pump(proc: subprocess.Popen, lines: queue.Queue) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def compiled_line(graph: dict[str, Any], prefix: str = "precompile") -> str:
    """``graph 3 compiled in 4.92 s: forward (mypkg/model.py:30) [0/1]; 17 kernel(s) so far``, where
    the kernels are the workload's; a backward is ``graph 3's backward compiled ...``."""
    how = "served from the cache" if graph.get("from_cache") else "compiled"
    number = f"graph {graph.get('number') or '?'}" + ("'s backward" if graph.get("kind") == "backward" else "")
    where = f" ({graph['location']})" if graph.get("location") else ""
    return (f"{prefix}: {number} {how} in {graph.get('seconds') or 0:.2f} s: {graph.get('function') or '?'}{where} "
            f"[{graph.get('compile_id')}]; {graph.get('kernels', 0)} kernel(s) so far")


def say_done(workload: dict[str, Any], say: Say, prefix: str = "precompile") -> None:
    """A finished workload in lines: the summary, then each graph break, recompile, float64."""
    breaks, recompiled = workload.get("graph_breaks", []), workload.get("recompiles", [])
    graphs = workload.get("counters", {}).get("stats", {}).get("unique_graphs", 0)
    float64 = sum(item["nodes"] for item in workload.get("float64") or [])
    say(
        f"{prefix}: workload {workload['name']} finished in {workload['seconds']:.1f} s: "
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
    for item in workload.get("float64") or []:
        say(
            f"  float64 computed in a compiled graph at {item['location']} ({item['function']}): "
            f"{item['nodes']} node(s): {', '.join(item['ops'])}"
        )
