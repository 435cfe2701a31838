"""What a run of the workloads comes to, decided once for the build hook, ``bake`` and ``warm``.

``capture()`` (builder/workload_run.py) returns the artifacts, or None when the workloads compiled
nothing; it raises WorkloadFailed when a workload raised, crashed, timed out or needs a GPU this
machine lacks (the workload's fault: it stops the caller unless the user set ``on-failure =
"warn"``), and Unusable when this torch or machine cannot make trustworthy artifacts (not the
workload's fault). A caller that can go on without artifacts (the build hook: a plain wheel still
works) says how it goes on; ``bake`` and ``warm`` exist to make artifacts, so for them every
outcome without artifacts stops.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from hatch_precompile.errors import Unusable, WorkloadFailed

NOTHING_COMPILED = "no torch.compile call ran and no TorchScript module was saved"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The artifacts, or the lines that say why there are none and whether the caller stops."""

    artifacts: Path | None
    lines: tuple[str, ...] = ()  # why there are none, one a line: the failure (its traceback), its hints
    stops: bool = False  # the caller stops (fails) rather than going on without artifacts

    @property
    def why(self) -> str:
        return "\n".join(self.lines)


def no_hints(failure: WorkloadFailed) -> list[str]:
    return []


def outcome_of(
    capturing: Callable[[], Path | None], workloads: Sequence[str], *, going_on: str | None = None,
    on_failure: str = "error", hints: Callable[[WorkloadFailed], list[str]] = no_hints,
) -> Outcome:
    """Run ``capturing`` (a call of ``capture()``) and say what it came to.

    ``going_on``: what the caller does without artifacts where it can go on ("building the wheel
    without precompiled artifacts"), the last line it says; None where it cannot, and every outcome
    without artifacts stops it. ``on_failure``: the option of that name; ``"warn"`` lets a caller that
    can go on do so after a workload failed. ``hints``: the lines that say what to do about a
    failure, after it."""
    try:
        artifacts = capturing()
    except Unusable as exc:  # this torch or machine, not the workload: a plain wheel is still good
        return _without(str(exc), going_on)
    except WorkloadFailed as exc:
        lines = [str(exc), *hints(exc)]
        if on_failure == "warn" and going_on is not None:
            return Outcome(None, (*lines, f'on-failure = "warn": {going_on}'))
        return Outcome(None, tuple(lines), stops=True)
    if artifacts is None:
        return _without(f"{named(workloads)} compiled nothing ({NOTHING_COMPILED})", going_on)
    return Outcome(artifacts)


def named(workloads: Sequence[str]) -> str:
    """``the workload 'm:f'``, or ``the workloads 'm:f', 'm:g'``, as a failure names one."""
    return f"the workload{'s' if len(workloads) > 1 else ''} {', '.join(map(repr, workloads))}"


def _without(line: str, going_on: str | None) -> Outcome:
    return Outcome(None, (line,), stops=True) if going_on is None else Outcome(None, (f"{line}; {going_on}",))
