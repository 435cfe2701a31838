"""Torch's own controls over when and how a compile runs, obeyed by a shipped guarded code as by a code
torch traced in this process.

A shipped guarded code stands for the code a cold process would compile the first time a call
reaches it. Until it first runs (since the process started, or since torch's last reset) it is a
compile still to be made; once it has run, it is one of the frame's compiled codes, which torch
runs wherever its guards hold. So each control is asked as torch asks it:

- the stance (``torch.compiler.set_stance``): ``force_eager`` turns Dynamo off, and no guard is
  asked; under ``eager_then_compile`` (``aot_eager_then_compile``), ``eager_on_recompile``,
  ``fail_on_recompile`` and ``skip_guard_eval_unsafe`` a compiled code runs and a compile is not
  made as the default makes it: a shipped code that has not run is left to torch, which runs the
  call eagerly, compiles it with aot_eager, raises, or traces it at the call the stance compiles;
  a forced backend (``force_backend=``) compiles with another backend: no shipped code runs;
- the recompile limit (``recompile_limit``, the compile's own, ``accumulated_recompile_limit``) and
  ``error_on_recompile``: the shipped codes that have run count as the frame's compiled codes, for
  their first run here and in torch's own count (``compute_cache_size``);
- a reset (``torch.compiler.reset()``, ``torch._dynamo.reset()``, ``reset_code_caches()``) drops
  every compiled code: each shipped code is back to not yet run, its first-run checks made again.

A shipped code whose first call a compiled code of torch's already serves is left to that code, as
a cold process runs its own. Where a control cannot be read here, the call is left to torch (traced).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable

from hatch_precompile.run.torch_internals import patching
from hatch_precompile.run.torch_internals.registry import lookup

# The stances under which a compiled code runs as under the default (its guards hold: it runs).
_RUNS_COMPILED = frozenset({"default", "eager_then_compile", "aot_eager_then_compile", "eager_on_recompile",
                            "fail_on_recompile"})
# What torch does, under each stance, with a call none of its compiled codes serves.
_INSTEAD = {
    "eager_then_compile": "runs a frame's first call eagerly and compiles the next (traced)",
    "aot_eager_then_compile": "compiles a frame's first call with aot_eager (traced)",
    "eager_on_recompile": "runs a call no compiled code serves eagerly",
    "fail_on_recompile": "raises at a call no compiled code serves",
}

_lock = threading.RLock()
_resets = itertools.count(1)
_generation = [0]  # torch's resets seen: a shipped code has run in this generation, or not yet
_ran: dict[int, list[Gate]] = {}  # by the id of the code object: its shipped codes (kept alive with it)
_after_resets: list[Callable[[], None]] = []  # told of each of torch's resets, once it is made


def watch() -> None:
    """Follow torch's resets, and add the shipped codes that have run to torch's count of a frame's
    compiled codes; once a process, from the package's first install on."""
    patching.wrap("code-caches-reset", after=_reset)
    patching.wrap("cache-size", after=_with_shipped)


def watching() -> str | None:
    """Why torch's controls cannot be followed here (a reset unseen, a count without the shipped
    codes), or None."""
    for name, what in (("code-caches-reset", "torch's resets"), ("cache-size", "torch's recompile limit")):
        if not patching.wrapped(name):
            return f"{what} cannot be followed here (torch moved)"
    return None


class Gate:
    """One shipped guarded code's leave to run, asked each time all its other guards hold."""

    def __init__(self, code: Any, limits: tuple[int | None, ...], said: Callable[[str], None],
                 manager: Any = None, traced: Callable[[str], None] | None = None) -> None:
        self.code = code  # the code object it is installed on (a frame of the function, or a resume function)
        self.limits = limits  # the package's compiles' own ``recompile_limit`` (None: torch's config)
        self.said = said  # told why a call was left to torch
        self.manager = manager  # its guard manager, asked which guard failed where torch traces a call of its code
        self.traced = traced  # told where torch traces a call of its code that no guarded code served, and why
        self._ran_in = -1
        with _lock:
            _ran.setdefault(id(code), []).append(self)

    def ran(self) -> bool:
        """Whether it has run since the process started, or since torch's last reset."""
        return self._ran_in == _generation[0]

    @staticmethod
    def generation() -> int:
        """How many of torch's resets this process has seen: what a first run decided holds until the next."""
        return _generation[0]

    def allows(self, frame_locals: Any) -> bool:
        """Whether it may run now; where not, the call is left to torch, and ``said`` is told why."""
        try:
            why = self._why_not(frame_locals)
        except Exception as exc:  # a control that cannot be read: left to torch
            why = f"torch's compile controls cannot be read here ({exc!r}; traced)"
        if why is None:
            return True
        if why:
            self.said(why)
        return False

    def has_run(self) -> None:
        """It ran: one of the frame's compiled codes until torch's next reset."""
        with _lock:
            self._ran_in = _generation[0]

    def _why_not(self, frame_locals: Any) -> str | None:
        stance, skip_unsafe, backend = _stance()
        if backend is not None:
            return (f"torch.compiler.set_stance(force_backend={_named(backend)}) compiles with another backend than "
                    "the build's (traced)")
        if stance not in _RUNS_COMPILED:
            return f"torch.compiler.set_stance({stance!r}) is a stance this hatch-precompile does not know (traced)"
        if self.ran():
            return None
        since = "torch's last reset" if _generation[0] else "the process started"
        if stance != "default":
            return (f"under torch.compiler.set_stance({stance!r}) torch {_INSTEAD[stance]}; this guarded code "
                    f"had not run since {since}")
        if skip_unsafe:
            return ("under torch.compiler.set_stance(skip_guard_eval_unsafe=True) torch raises at a call no "
                    f"compiled code serves; this guarded code had not run since {since}")
        same, total, serving = _torch_codes(self.code, frame_locals)
        if serving:
            return ""  # torch's own compiled code serves this call, as in a cold process: not said
        with _lock:
            ours = sum(1 for gate in _ran.get(id(self.code), ()) if gate is not self and gate.ran())
        return _limits(self.limits, same + ours, total + ours)


def _limits(limits: tuple[int | None, ...], same: int, total: int) -> str | None:
    """Why a frame holding ``same`` compiled codes (``total`` in all) compiles no other here, or None.
    ``limits``: the compiles' own recompile limits (None: torch's config); the lowest holds."""
    lookup("recompile-limit", "read")
    from torch._dynamo import config  # noqa: TID251  (the touchpoint's owner)

    limit = min(config.recompile_limit if given is None else given for given in limits or (None,))
    if not all(type(value) is int for value in (limit, config.accumulated_recompile_limit)):
        raise TypeError(f"recompile limits of another type: {limit!r}, {config.accumulated_recompile_limit!r}")
    if total >= config.accumulated_recompile_limit:
        return (f"torch._dynamo.config.accumulated_recompile_limit ({config.accumulated_recompile_limit}) is "
                f"reached: torch runs the call eagerly")
    if same >= limit:
        return (f"the recompile limit ({limit}) is reached: this frame holds {same} compiled code(s), and torch runs "
                "the call eagerly")
    if same and config.error_on_recompile:
        return "torch._dynamo.config.error_on_recompile: torch raises at a second compiled code of a frame"
    return None


def _stance() -> tuple[str, bool, Any]:
    """Torch's stance now: its name, whether guards are skipped, the backend it forces (or None)."""
    lookup("compile-stance", "read")
    from torch._dynamo import eval_frame  # noqa: TID251

    stance = eval_frame._stance
    name, skip_unsafe, backend = stance.stance, stance.skip_guard_eval_unsafe, stance.backend
    if not isinstance(name, str) or not isinstance(skip_unsafe, bool):
        raise TypeError(f"a stance of another shape: {stance!r}")
    return name, skip_unsafe, backend


def _torch_codes(code: Any, frame_locals: Any) -> tuple[int, int, bool]:
    """Torch's own compiled codes of ``code``: how many hold this call's ID-matched objects (as torch
    counts them for the recompile limit), how many in all, and whether one serves this call."""
    lookup("cache-entry-list", "call")
    from torch._dynamo import eval_frame  # noqa: TID251

    same = total = 0
    serving = False
    for entry in eval_frame._debug_get_cache_entry_list(code):
        total += 1
        manager = entry.guard_manager
        matched = manager.id_matched_objs
        if all(ref() is None or frame_locals.get(name) is ref() for name, ref in matched.items()):
            same += 1
        serving = serving or bool(manager.check(frame_locals))
    return same, total, serving


def _with_shipped(arguments: dict[str, Any], size: Any) -> None:
    """Torch's count of a frame's compiled codes (``compute_cache_size``), the shipped codes that have
    run added: the recompile limit is reached where a cold process reaches it."""
    frame = arguments.get("frame")
    code = getattr(frame, "f_code", None)
    with _lock:
        ours = sum(1 for gate in _ran.get(id(code), ()) if gate.ran()) if code is not None else 0
    if ours:
        for field in ("num_cache_entries", "num_cache_entries_with_same_id_matched_objs",
                      "total_cache_entries_all_regions"):
            if isinstance(getattr(size, field, None), int):
                setattr(size, field, getattr(size, field) + ours)
    with _lock:
        gates = list(_ran.get(id(code), ())) if code is not None else []
    if gates:
        _tell_traced(gates, getattr(frame, "f_locals", None))


def _tell_traced(gates: list[Gate], frame_locals: Any) -> None:
    """Torch is about to trace a call of a code shipped guarded codes are installed on (torch counts a
    frame's compiled codes only where none served the call): the function is told, with the first
    guard that failed for it, so that ``served()`` never calls served a function whose calls trace.
    A call every guard of which held was left to torch by a control (said already): not told again.
    Asking the guards again runs no guard that had not run: the last guard, which loads the graphs,
    runs only once all the others hold, and keeps its answer."""
    failed = []
    for gate in gates:
        try:
            info = gate.manager.root.check_verbose(frame_locals)
        except Exception as exc:  # a guard manager of another shape: the trace is told, its why unknown
            failed.append(f"its guards cannot be asked why ({exc!r})")
            continue
        if not info.result:
            parts = [str(part) for part in (info.verbose_code_parts or ())]
            failed.append(parts[0].split("  #", 1)[0].strip() if parts else "a guard failed")  # torch's quoted line off
    told = next((gate.traced for gate in gates if gate.traced is not None), None)
    if failed and told is not None:
        told(f"{len(failed)} of its {len(gates)} shipped guarded code(s) failed a guard ({failed[0]})")


def after_reset(told: Callable[[], None]) -> None:
    """Have ``told()`` called after each of torch's resets (what torch dropped with it is said so)."""
    with _lock:
        _after_resets.append(told)


def _reset(arguments: dict[str, Any], result: Any) -> None:
    """Torch dropped its compiled codes: every shipped code is back to not yet run."""
    with _lock:
        _generation[0] = next(_resets)
        told = list(_after_resets)
    for tell in told:  # an after hook's failure is the touchpoint's, logged: the reset stands
        tell()


def _named(backend: Any) -> str:
    return repr(backend) if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)
