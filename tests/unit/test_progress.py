"""What a build shows while it runs, without torch: each phase's heartbeat from a real child
process, a line per compile from torch's metrics, the folding of a set's lines in GitHub Actions,
and torch's trace rendered by the real tlparse (or how to get it)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hatch_precompile.builder import torch_trace
from hatch_precompile.builder.reporter import Reporter
from hatch_precompile.child import progress, supervisor, workload_loop

# A child that goes through every phase a build's child does, as build_child.py says them, each
# long enough for several heartbeats; it compiles nothing (no torch here).
SCRIPTED_CHILD = """
import json, sys, time
from pathlib import Path
from hatch_precompile.child import progress, workload_loop
from hatch_precompile.protocol import ChildResult

def main(argv):
    spec = json.loads(Path(argv[1]).read_text())
    pause = spec["pause"]
    progress.phase("importing torch")
    time.sleep(pause)
    workload_loop.emit("start", workload="mypkg.precompile:workload", index=1, total=1)
    time.sleep(pause)
    with progress.within("capturing step 'loss' (aotinductor route)"):
        time.sleep(pause)
        with progress.within("proving step 'loss' in a fresh process"):
            time.sleep(pause)
    workload_loop.emit("compiled", number=1, compile_id="0/0", kind="forward", function="forward",
                       location="mypkg/model.py:30", seconds=4.921, from_cache=False, kernels=17)
    workload_loop.emit("compiled", number=1, compile_id="0/0", kind="backward", function="forward",
                       location="mypkg/model.py:30", seconds=3.2, from_cache=False, kernels=27)
    workload_loop.emit("done", name="mypkg.precompile:workload", seconds=9.5, counters={}, kernels=27)
    progress.phase("saving what compiling produced")
    time.sleep(pause)
    workload_loop.write_result(Path(spec["out"]), ChildResult("ok", workloads=[]))
    return 0
"""


def test_every_phase_of_the_child_has_a_heartbeat_naming_it(tmp_path):
    (tmp_path / "scripted_child.py").write_text(SCRIPTED_CHILD)
    said: list[str] = []
    job = supervisor.Job("scripted_child", {"pause": 0.45}, "precompile", said.append, relay=said.append,
                         heartbeat=0.1)
    supervisor.run(job, tmp_path / "work", env={**os.environ, "PYTHONPATH": str(tmp_path)})
    beats = [line for line in said if " still " in line]
    kinds = [
        "precompile: still importing torch (",
        "precompile: workload mypkg.precompile:workload still running (",
        "): capturing step 'loss' (aotinductor route) (",
        "): proving step 'loss' in a fresh process (",
        "precompile: still saving what compiling produced (",
    ]
    firsts = [next((i for i, line in enumerate(said) if kind in line), None) for kind in kinds]
    assert None not in firsts and firsts == sorted(firsts), "\n".join(said)
    assert all(line.endswith(" s)") and line.count("(") == 1 for line in said if "still saving" in line), \
        "the stretches ended with the workload"
    assert [line for line in said if " still " not in line] == [
        "precompile: running workload mypkg.precompile:workload",
        "precompile: graph 1 compiled in 4.92 s: forward (mypkg/model.py:30) [0/0]; 17 kernel(s) so far",
        "precompile: graph 1's backward compiled in 3.20 s: forward (mypkg/model.py:30) [0/0]; 27 kernel(s) so far",
        "precompile: workload mypkg.precompile:workload finished in 9.5 s: 0 graph(s), 0 graph break(s), "
        "0 recompile(s), 27 kernel(s), 0.00 MB",
    ]
    assert len(beats) >= 5


ROOT = Path(__file__).resolve().parents[2]  # on sys.path, as a project's root is in a build's child


def metric(compile_id, name=None, line=None, seconds=1.0, ops=3, forward=True, hits=0, misses=1, runtime=False):
    return SimpleNamespace(compile_id=compile_id, co_name=name, co_filename=name and f"{ROOT}/mypkg/{name}.py",
                           co_firstlineno=line, entire_frame_compile_time_s=seconds, graph_op_count=ops,
                           is_forward=forward, is_runtime=runtime, aotautograd_local_cache_hit_count=hits,
                           aotautograd_local_cache_miss_count=misses)


def events(captured: str) -> list[dict]:
    return [workload_loop.parse_event(line) for line in captured.splitlines() if workload_loop.parse_event(line)]


def test_a_line_per_graph_numbered_as_dynamos_graphs_with_the_workloads_kernels(capsys, monkeypatch):
    metrics: list = []
    kernels = iter([10, 10, 15, 21, 30, 33])  # the ISA probes of the import: 10; the rest the workloads'
    utils = SimpleNamespace(get_compilation_metrics=lambda: list(metrics))
    monkeypatch.setattr(sys, "path", [str(ROOT), *sys.path])
    lines = progress.CompileLines(utils, lambda: next(kernels), hooked=False)
    lines.restart()
    metrics += [metric("0/0", "loss", 59, 9.5), metric("0/0", forward=False, seconds=3.42),
                metric("1/0", "probe", 5, ops=0, misses=0), metric("-/-", runtime=True)]
    lines.flush()
    lines.flush()  # nothing new: nothing said twice
    lines.restart()  # the next workload: torch's metrics are cleared, the kernels counted from here
    metrics[:] = [metric("2/0", "forward", 30, 2.0, hits=1, misses=0)]
    lines.flush()
    said = events(capsys.readouterr().out)
    assert [(e["number"], e["kind"], e["function"], e["location"], e["seconds"], e["kernels"], e["from_cache"])
            for e in said] == [
        (1, "forward", "loss", "mypkg/loss.py:59", 9.5, 5, False),
        (1, "backward", "loss", "mypkg/loss.py:59", 3.42, 11, False),
        (2, "forward", "forward", "mypkg/forward.py:30", 2.0, 3, True),
    ]
    assert supervisor.compiled_line({**said[2], "kind": "forward"}) == (
        "precompile: graph 2 served from the cache in 2.00 s: forward (mypkg/forward.py:30) [2/0]; 3 kernel(s) so far")


def test_the_frame_being_compiled_is_a_stretch_the_heartbeat_names(capsys, monkeypatch):
    monkeypatch.setattr(sys, "path", [str(ROOT), *sys.path])
    lines = progress.CompileLines(SimpleNamespace(get_compilation_metrics=list), lambda: 0, hooked=False)
    code = SimpleNamespace(co_name="training_loss", co_filename=f"{ROOT}/mypkg/model.py", co_firstlineno=59)
    lines._before({"code": code})
    lines._before({"code": code})  # the first raised, so no after: it ended where the next began
    lines._after({"code": code}, None)
    lines._after({}, None)
    what = "compiling training_loss (mypkg/model.py:59)"
    assert [(e["event"], e["what"]) for e in events(capsys.readouterr().out)] == [
        ("enter", what), ("leave", what), ("enter", what), ("leave", what)]


def test_unreadable_metrics_say_nothing_and_fail_nothing(capsys):
    def broken():
        raise RuntimeError("torch moved it")

    lines = progress.CompileLines(SimpleNamespace(get_compilation_metrics=broken), lambda: 0, hooked=False)
    lines.flush()
    odd = progress.CompileLines(SimpleNamespace(get_compilation_metrics=lambda: [object(), 3]), lambda: 0, hooked=False)
    odd.flush()
    assert events(capsys.readouterr().out) == []


@pytest.mark.parametrize("github", [True, False])
def test_a_sets_lines_fold_into_a_group_in_github_actions(monkeypatch, github):
    monkeypatch.setenv("GITHUB_ACTIONS", "true" if github else "")
    shown: list[str] = []
    reporter = Reporter(shown.append, shown.append)
    with reporter.group("running mypkg.precompile:workload", said=False):
        reporter.info("graph 1 compiled")
    with pytest.raises(ValueError), reporter.group("artifact set for CPU capability avx2"):
        raise ValueError("a failed workload still closes its group")
    if github:
        assert shown == ["::group::precompile: running mypkg.precompile:workload", "precompile: graph 1 compiled",
                         "::endgroup::", "::group::precompile: artifact set for CPU capability avx2", "::endgroup::"]
    else:
        assert shown == ["precompile: graph 1 compiled", "precompile: artifact set for CPU capability avx2"]


# -- torch's trace and tlparse ----------------------------------------------------------------------

# The start of a real trace (torch 2.13, one compile), enough for tlparse to read.
TRACE = (
    'V1126 15:28:01.000000 1234 torch/_dynamo/convert_frame.py:1000] {"dynamo_start": {"stack": '
    '[{"line": 2, "name": "f", "filename": 0}]}, "frame_id": 0, "frame_compile_id": 0, "attempt": 0}\n'
)


def test_without_tlparse_the_trace_stays_and_the_line_says_how_to_see_it(tmp_path, monkeypatch):
    log = tmp_path / "dedicated_log_torch_trace_ab12.log"
    log.write_text(TRACE)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))  # nothing beside it either
    report = torch_trace.render(tmp_path)
    assert report.tool is None and report.logs == [log] and report.pages == []
    assert report.lines() == [
        f"torch's structured trace is in {tmp_path}; to see what compiled and why in a browser, install tlparse "
        f"(pip install tlparse) and run: tlparse {log} -o {tmp_path / 'html'} --no-browser"]
    assert json.loads(json.dumps(report.as_json()))["tlparse"] is None


@pytest.fixture
def tlparse():
    found = torch_trace.tlparse()
    if found is None:
        pytest.skip("no tlparse: install the test extra")
    return found


def test_tlparse_renders_each_new_log_the_largest_to_html(tmp_path, tlparse):
    old = tmp_path / "dedicated_log_torch_trace_old.log"
    old.write_text(TRACE)
    before = set(torch_trace.logs(tmp_path))
    small, large = tmp_path / "dedicated_log_torch_trace_a.log", tmp_path / "dedicated_log_torch_trace_b.log"
    small.write_text(TRACE)
    large.write_text(TRACE * 3)
    report = torch_trace.render(tmp_path, before)
    assert report.logs == [large, small] and report.tool == tlparse
    assert report.pages == [tmp_path / "html" / "index.html", tmp_path / "html-2" / "index.html"]
    assert all(page.is_file() for page in report.pages) and not (tmp_path / "html-3").exists()
    assert report.lines() == [f"torch's compile report (tlparse): {page}" for page in report.pages]


def test_a_trace_tlparse_cannot_render_is_a_line_not_a_failure(tmp_path, tlparse):
    (tmp_path / "dedicated_log_torch_trace_a.log").write_text(TRACE)
    (tmp_path / "html").write_text("a file where tlparse would write its dir")
    report = torch_trace.render(tmp_path)
    (line,) = report.lines()
    assert line.startswith(f"tlparse could not render {tmp_path / 'dedicated_log_torch_trace_a.log'} (exit 1): Error:")
    assert report.pages == []


def test_nothing_compiled_is_said_so(tmp_path):
    assert torch_trace.render(tmp_path).lines() == [f"torch wrote no structured trace into {tmp_path} (nothing was compiled)"]


def test_tlparse_is_found_beside_the_interpreter_when_not_on_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "tlparse").write_text("#!/bin/sh\n")
    (bin_dir / "tlparse").chmod(0o755)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert torch_trace.tlparse() is None
    assert torch_trace.tlparse(str(bin_dir / "python")) == str(bin_dir / "tlparse")  # the child's interpreter's
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    assert torch_trace.tlparse() == str(bin_dir / "tlparse")
    assert torch_trace.environ({"A": "1"}, tmp_path / "t") == {"A": "1", "TORCH_TRACE": str(tmp_path / "t")}
    assert (tmp_path / "t").is_dir()


def test_the_builds_last_line_says_where_the_time_went():
    from hatch_precompile.builder import build_summary

    manifests = [SimpleNamespace(timings={"torch_import_seconds": 4.0}, workloads=[{"seconds": 20.0}, {"seconds": 6.5}])]
    assert build_summary.total(manifests, 40.04) == (  # type: ignore[arg-type]
        "done in 40.0 s: 1 artifact set(s); importing torch 4.0 s, the workloads 26.5 s, saving and laying out 9.5 s")


def test_the_short_names_are_the_import_paths(monkeypatch, tmp_path):
    (tmp_path / "pkg").mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert progress.short(str(tmp_path / "pkg" / "model.py")) == "pkg/model.py"
    assert progress.short("/elsewhere/model.py") == "/elsewhere/model.py"


TEMP_CHILD = """
import json, tempfile
from pathlib import Path
from hatch_precompile.child import workload_loop
from hatch_precompile.protocol import ChildResult

def main(argv):
    spec = json.loads(Path(argv[1]).read_text())
    workload_loop.write_result(Path(spec["out"]), ChildResult("ok", data={"temp": tempfile.gettempdir()}))
    return 0
"""


@pytest.mark.parametrize("own_temp", [True, False])
def test_a_child_gets_a_temp_dir_of_its_own_unless_it_runs_on_the_users_torch(tmp_path, own_temp):
    """Torch keeps its ~150 MB C++ prefix header under the temp dir, per torch path: worth keeping for
    the user's own torch (the next build on it builds none), not for an isolated build env's."""
    (tmp_path / "temp_child.py").write_text(TEMP_CHILD)
    callers = tmp_path / "callers-tmp"
    callers.mkdir()
    job = supervisor.Job("temp_child", {}, "precompile", print, relay=print, own_temp=own_temp)
    result = supervisor.run(job, tmp_path / "work", env={**os.environ, "PYTHONPATH": str(tmp_path), "TMPDIR": str(callers)})
    assert Path(result.data["temp"]) == (tmp_path / "work" / "tmp" if own_temp else callers)
