"""What a run of the workloads comes to, for the build hook (it can go on without artifacts) and for
bake and warm (they cannot), decided in builder/capture_outcome.py alone: in-process, nothing runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hatch_precompile.builder import capture_outcome
from hatch_precompile.errors import CannotCompile, Unusable, WorkloadFailed

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = "mypkg.precompile:workload"
GOING_ON = "building the wheel without precompiled artifacts"
TRACEBACK = "\nTraceback (most recent call last):\n  File \"precompile.py\", line 2, in workload\nValueError: boom"


def raising(exc: BaseException):
    def capturing():
        raise exc
    return capturing


def test_artifacts_are_the_outcome_whoever_asks(tmp_path):
    for going_on in (GOING_ON, None):
        outcome = capture_outcome.outcome_of(lambda: tmp_path, [WORKLOAD], going_on=going_on)
        assert outcome == capture_outcome.Outcome(tmp_path) and not outcome.stops and outcome.why == ""


def test_nothing_compiled_is_worded_once_and_stops_only_a_caller_that_cannot_go_on():
    said = "the workload 'mypkg.precompile:workload' compiled nothing (no torch.compile call ran and no TorchScript " \
           "module was saved)"
    build = capture_outcome.outcome_of(lambda: None, [WORKLOAD], going_on=GOING_ON)
    assert build == capture_outcome.Outcome(None, (f"{said}; {GOING_ON}",), stops=False)
    bake = capture_outcome.outcome_of(lambda: None, [WORKLOAD])
    assert bake == capture_outcome.Outcome(None, (said,), stops=True)
    several = capture_outcome.outcome_of(lambda: None, ["m:a", "m:b"])
    assert several.why.startswith("the workloads 'm:a', 'm:b' compiled nothing (")


def test_a_failed_workload_stops_with_its_traceback_and_hints_unless_warn_lets_the_build_go_on():
    failure = WorkloadFailed(WORKLOAD, TRACEBACK, missing_module="scipy")
    hints = lambda exc: [f"install {exc.missing_module}"]  # noqa: E731
    stopped = capture_outcome.outcome_of(raising(failure), [WORKLOAD], going_on=GOING_ON, hints=hints)
    assert stopped.stops and stopped.artifacts is None
    assert stopped.lines == (f"workload 'mypkg.precompile:workload' failed: {TRACEBACK}", "install scipy")
    assert "ValueError: boom" in stopped.why
    warned = capture_outcome.outcome_of(raising(failure), [WORKLOAD], going_on=GOING_ON, on_failure="warn", hints=hints)
    assert not warned.stops and warned.lines == (*stopped.lines, f'on-failure = "warn": {GOING_ON}')
    # bake and warm make artifacts or nothing: `on-failure = "warn"` does not make a failure theirs to ignore
    assert capture_outcome.outcome_of(raising(failure), [WORKLOAD], on_failure="warn").stops


@pytest.mark.parametrize("exc", [Unusable("torch 2.6.0 is too old"), CannotCompile("this machine cannot build C++ kernels: no g++")])
def test_an_unusable_torch_or_machine_lets_the_build_go_on_and_stops_bake_and_warm(exc):
    build = capture_outcome.outcome_of(raising(exc), [WORKLOAD], going_on=GOING_ON)
    assert build == capture_outcome.Outcome(None, (f"{exc}; {GOING_ON}",), stops=False)
    assert capture_outcome.outcome_of(raising(exc), [WORKLOAD]) == capture_outcome.Outcome(None, (str(exc),), stops=True)


def test_an_error_not_of_capture_is_not_swallowed():
    with pytest.raises(OSError):
        capture_outcome.outcome_of(raising(OSError("disk full")), [WORKLOAD], going_on=GOING_ON)


def test_only_capture_outcome_decides_what_captures_failures_mean():
    """The build hook, bake and warm call capture_outcome.outcome_of; none catches capture's errors itself."""
    caught = []
    for path in sorted((ROOT / "hatch_precompile").rglob("*.py")):
        if path.name == "capture_outcome.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                names = {n.id if isinstance(n, ast.Name) else getattr(n, "attr", "") for n in ast.walk(node.type)}
                if names & {"WorkloadFailed", "Unusable", "CannotCompile"}:
                    caught.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not caught, "capture's outcome handled outside builder/capture_outcome.py: " + ", ".join(caught)
    callers = {p.relative_to(ROOT).as_posix() for p in (ROOT / "hatch_precompile").rglob("*.py")
               if "capture_outcome.outcome_of(" in p.read_text()}
    assert {"hatch_precompile/hatch/plugin.py", "hatch_precompile/tools/bake.py",
            "hatch_precompile/tools/warm.py"} <= callers
