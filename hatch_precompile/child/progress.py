"""What a child tells its parent while it works, besides each workload's start and end
(workload_loop.py): the phase it is in, and one line per graph torch compiled, as it ends.

The parent (supervisor.py) turns these into the lines a person watching a build reads: a
heartbeat that says the phase (torch's import, a workload, a step's capture, its proof in a
fresh process, the frame Dynamo is compiling, the saving after the last workload), and ``graph 3 compiled in 4.92 s: forward
(mypkg/model.py:30) [0/1]; 17 kernel(s) so far``. Observation only: what cannot be read is not
said, and nothing here can fail the work it reports on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any, Callable

from hatch_precompile.child.workload_loop import emit
from hatch_precompile.run.torch_internals import patching

log = logging.getLogger("hatch_precompile.progress")


def phase(text: str) -> None:
    """The child is now ``text`` ("importing torch"): what its heartbeat says until the next phase
    or workload."""
    emit("phase", phase=text)


@contextlib.contextmanager
def within(what: str) -> Iterator[None]:
    """A stretch of the current phase (a step's capture, its proof), said by the heartbeat
    beside the workload's while it lasts."""
    emit("enter", what=what)
    try:
        yield
    finally:
        emit("leave", what=what)


class CompileLines:
    """A ``compiled`` event for each graph torch recorded in its compilation metrics, told when
    Dynamo's next compile starts or its last one returns (the ``dynamo-compile`` touchpoint), and
    at the end of each workload (``flush``): a backward compiled at the first ``backward()`` is told
    at the next of them. Dynamo's graphs are numbered from 1 across the process (a backward takes
    its forward's number), each with the kernels the workload has built so far."""

    def __init__(self, dynamo_utils: Any, kernels: Callable[[], int], hooked: bool = True) -> None:
        self.dynamo_utils = dynamo_utils
        self.kernels = kernels
        self.seen = 0  # torch's metrics already looked at, since it last cleared them
        self.base = kernels()  # what the workload found built (the import's ISA probes): not its own
        self.numbered = 0
        # compile id -> the forward graph's number, function and location, for its backward
        self.frames: dict[str, tuple[int | None, str | None, str | None]] = {}
        self.compiling: str | None = None  # the frame Dynamo is compiling, as the heartbeat names it
        if hooked:  # else told only at flush() (a test's own metrics)
            patching.wrap("dynamo-compile", before=self._before, after=self._after)

    def _before(self, arguments: dict[str, Any]) -> None:
        """A frame's compile starts: tell what came since, and let the heartbeat name the frame."""
        self.flush()
        self._left()
        code = arguments.get("code")
        if code is not None:
            self.compiling = (f"compiling {getattr(code, 'co_name', '?')} ({short(getattr(code, 'co_filename', '?'))}:"
                              f"{getattr(code, 'co_firstlineno', '?')})")
            emit("enter", what=self.compiling)

    def _after(self, arguments: dict[str, Any], result: Any) -> None:
        self._left()
        self.flush()

    def _left(self) -> None:
        """The compile's stretch ended (a compile that raised ends at the next one's start)."""
        if self.compiling is not None:
            emit("leave", what=self.compiling)
            self.compiling = None

    def restart(self) -> None:
        """Torch's metrics are about to be cleared (a new workload): tell what is left first."""
        self.flush()
        self.seen, self.base = 0, self.kernels()

    def flush(self) -> None:
        try:
            metrics = self.dynamo_utils.get_compilation_metrics()
        except Exception:  # torch's metrics are internal API: no lines, the summary still comes
            log.debug("progress: compilation metrics not read", exc_info=True)
            return
        if len(metrics) < self.seen:  # cleared by someone else
            self.seen = 0
        fresh, self.seen = metrics[self.seen:], len(metrics)
        for metric in fresh:
            try:
                graph = self._graph(metric)
            except Exception:
                log.debug("progress: a compilation metric not read", exc_info=True)
                continue
            if graph is not None:
                emit("compiled", kernels=self.kernels() - self.base, **graph)

    def _graph(self, metric: Any) -> dict[str, Any] | None:
        """What the line says of one metric, or None for a frame that produced no graph."""
        if getattr(metric, "is_runtime", False):
            return None
        compile_id = str(getattr(metric, "compile_id", None))
        backward = getattr(metric, "is_forward", True) is False
        seconds = getattr(metric, "entire_frame_compile_time_s", None)
        if seconds is None:
            seconds = (getattr(metric, "duration_us", None) or 0) / 1e6
        hits = getattr(metric, "aotautograd_local_cache_hit_count", 0) or 0
        misses = getattr(metric, "aotautograd_local_cache_miss_count", 0) or 0
        if backward:
            number, function, location = self.frames.get(compile_id, (None, None, None))
        else:
            if not (getattr(metric, "graph_op_count", None) or misses or hits):
                return None  # Dynamo looked at the frame and made no graph
            filename = getattr(metric, "co_filename", None)
            function = getattr(metric, "co_name", None)
            location = f"{short(filename)}:{getattr(metric, 'co_firstlineno', '?')}" if filename else None
            self.numbered += 1
            number = self.numbered
            self.frames[compile_id] = (number, function, location)
        return {"number": number, "compile_id": compile_id, "kind": "backward" if backward else "forward",
                "function": function, "location": location, "seconds": round(float(seconds), 3),
                "from_cache": bool(hits and not misses)}


def short(filename: str) -> str:
    """``filename`` relative to the ``sys.path`` entry it is under (``mypkg/model.py``), as a
    person reading a build log names it; as it is where it is under none."""
    real = os.path.realpath(filename)
    for root in sorted((os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)), key=len, reverse=True):
        if real.startswith(root + os.sep):
            return real[len(root) + 1:]
    return filename
