"""An installed entry's compiled graphs, and each guarded code's last guard: run once all its other
guards hold, it asks torch's compile controls (compile_controls.py) at every call, and, the first
time the code is about to run since torch's last reset, checks what the trace read that no guard
holds (run/served/unguarded_reads.py) and loads the graphs the code calls.

Torch's install loads every compiled graph of an entry (its generated code, its kernels), whichever
calls the process makes; an entry of several compiles holds every compile the workload made of the
function (model sizes, train() and eval()). Such an entry gets stand-ins (``deferred``), and each
graph is loaded by the first guarded code that calls it, when it first runs: a process that only
infers loads the inference graph. One compile's entry (each code one guarded code: its first call
runs every graph anyway) is loaded at install, as torch loads it, so that its first call runs at once;
where its install waits for the function's first call, its graphs are loaded before, at
``torch.compile`` (``dynamo_cache.ahead``); graphs loaded by an install torch then refused are kept
for the retry.
"""

from __future__ import annotations

import dis
import hashlib
import threading
import types
from typing import Any, Callable, Iterator

from hatch_precompile.run.torch_internals.registry import lookup


class Graphs:
    """An entry's compiled graphs (torch's backend artifacts, by the global name its bytecode calls
    them by), each loaded once: at install for one compile's entry (``at_install``); else by the last
    guard of the first guarded code that calls it, so that where loading fails the call is traced,
    never broken."""

    def __init__(self, artifacts: dict[str, Any], not_loaded: Callable[[str], None], at_install: bool = False,
                 loaded: dict[str, Any] | None = None) -> None:
        self._artifacts = artifacts
        self.at_install = at_install
        self._loaded: dict[str, Any] = dict(loaded or {})  # ``loaded``: graphs loaded before (``ahead``)
        self._lock = threading.RLock()  # two threads' first calls load a graph once
        self._not_loaded = not_loaded

    def called_by(self, dynamo: Any, loads: dict[int, frozenset[str]]) -> dict[str, set[str]]:
        """The graphs each guarded code's bytecode calls, by the digest of its guards' state (``loads``:
        globals_by_code's)."""
        calls: dict[str, set[str]] = {}
        for code in dynamo.codes:
            for guarded in [] if getattr(code, "bypassed", False) else code.guarded_codes:
                digest = hashlib.sha256(guarded.guards_state).hexdigest()
                calls.setdefault(digest, set()).update(loads.get(id(guarded), frozenset()) & set(self._artifacts))
        return calls

    def deferred(self) -> dict[str, Any]:
        """What torch's install takes: for one compile's entry, each graph loaded as torch's install
        asks (its graphs are called with nothing between), and kept here; else stand-ins."""
        if self.at_install:
            return {name: _Now(self, name) for name in self._artifacts}
        return {name: _Deferred(self, name) for name in self._artifacts}

    def ahead(self) -> dict[str, Any]:
        """The graphs loaded so far, for an install tried again later."""
        return dict(self._loaded)

    def loaded(self, name: str) -> Any:
        graph = self._loaded.get(name)
        if graph is None:
            with self._lock:
                if name not in self._loaded:
                    lookup("graph-load", "call")
                    self._loaded[name] = self._artifacts[name].after_deserialization()
                graph = self._loaded[name]
        return graph

    def last_guard(self, root: Any, names: set[str], first_run: Callable[[Any], str | None],
                   refused: Callable[[str], None], gate: Any) -> None:
        """A guarded code's last guard: ``gate.allows`` (torch's compile controls: the stance, the
        recompile limit) at every call; then, at its first run since torch's last reset,
        ``first_run`` (why what its trace read differs here, or None), asked once and its answer
        kept until the next reset, and its graphs ``names`` loaded where not at install. A torch
        whose guard managers have no such last guards asks both at each call instead, with the
        other guards, and gets the graphs loaded now; a failure refuses the entry, as in torch's
        install."""
        add_last = getattr(root, "add_epilogue_lambda_guard", None)
        if add_last is None:
            for name in sorted(names if not self.at_install else ()):
                self.loaded(name)

            def each_call(frame_locals: Any) -> bool:
                if not gate.allows(frame_locals) or first_run(frame_locals) is not None:
                    return False
                gate.has_run()
                return True

            root.add_lambda_guard(each_call, ["hatch-precompile: torch's compile controls allow it; what its trace "
                                              "read is as at build"], None)
            return
        decided: dict[int, bool] = {}  # its first run's answer, by the reset it followed

        def ready(frame_locals: Any) -> bool:
            if not gate.allows(frame_locals):
                return False
            now = gate.generation()
            if now in decided:
                return decided[now]
            try:
                why = first_run(frame_locals)
            except Exception as exc:  # a check that cannot be made: traced
                why = f"what its trace read cannot be checked here ({exc!r})"
            if why is None and not self.at_install:
                try:
                    for name in sorted(names):
                        self.loaded(name)
                except Exception as exc:  # another torch's graphs, a kernel that does not load here
                    self._not_loaded(repr(exc))
                    decided[now] = False
                    return False
            elif why is not None:
                refused(why)
            decided[now] = why is None
            if decided[now]:
                gate.has_run()
            return decided[now]

        add_last(ready, ["hatch-precompile: torch's compile controls allow it; what its trace read is as at build; "
                         "its compiled graphs loaded"], None)


class _Now:
    """What torch's install takes for one compile's artifact: its ``after_deserialization`` gives the
    loaded graph itself (loaded now, or before: an install tried again)."""

    def __init__(self, graphs: Graphs, name: str) -> None:
        self._graphs, self._name = graphs, name

    def after_deserialization(self) -> Callable[..., Any]:
        return self._graphs.loaded(self._name)


class _Deferred:
    """What torch's install takes for a backend artifact: its ``after_deserialization`` gives a
    function that calls the graph, loading it first where no guard has (it always has, here)."""

    def __init__(self, graphs: Graphs, name: str) -> None:
        self._graphs, self._name = graphs, name

    def after_deserialization(self) -> Callable[..., Any]:
        loaded, name = self._graphs.loaded, self._name

        def compiled_graph(*args: Any, **kwargs: Any) -> Any:
            return loaded(name)(*args, **kwargs)

        return compiled_graph


def globals_by_code(dynamo: Any, to_code: Callable[[Any], Any]) -> dict[int, frozenset[str]]:
    """The globals each guarded code's compiled bytecode loads, by the guarded code's id: read once an
    entry (where its graphs load ahead, before the first call that installs it)."""
    return {id(guarded): frozenset(globals_loaded(to_code(guarded.dynamo_code)))
            for code in dynamo.codes if not getattr(code, "bypassed", False) for guarded in code.guarded_codes}


def globals_loaded(compiled: Any) -> Iterator[str]:
    """Each global name a compiled code (its nested codes too) loads."""
    pending = [compiled]
    while pending:
        code = pending.pop()
        pending += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        for instruction in dis.get_instructions(code):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(instruction.argval, str):
                yield instruction.argval
