"""`hatch-precompile snoop` on real programs: what compiled, who owns it, what the workload missed."""

from __future__ import annotations

import json
import os
import re

import pytest
from conftest import run

from integration.test_touchpoints import misbehaving

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

WORKLOAD_SHAPES = """
import sample_pkg
trainer = sample_pkg.Trainer(sample_pkg.make_model())
images, labels = sample_pkg.make_batch()
trainer.step(images, labels)
trainer.predict(images)
"""
# The sample trains through its exported step (any batch size); its predict() is compiled.
BATCH_64 = """
import sample_pkg
trainer = sample_pkg.Trainer(sample_pkg.make_model())
trainer.predict(sample_pkg.make_batch(batch_size=64)[0])
"""
PITFALLS = """
import sys
import torch

def scale(x, w):
    return (x * w).sum()

def threshold(x):
    if x.sum().item() > 0:  # a Python number out of a tensor: a graph break
        return x * 2
    return x

def square(x):
    return x * x

torch.compile(scale)(torch.ones(8, dtype=torch.float64), torch.ones(8))  # float64 into float32 math
torch.compile(threshold)(torch.ones(4))
compiled = torch.compile(square)
for n in (4, 5):  # the second shape recompiles
    compiled(torch.ones(n, 3))
sys.exit(3)
"""


ONE_KERNEL = """
import json, sys, tempfile
import torch
print(json.dumps({"temp": tempfile.gettempdir()}), file=sys.stderr)
print(float(torch.compile(lambda x: (x.sin() * 3).relu().sum())(torch.randn(64, 64))))
"""


def snoop(python, tmp_path, script: str, *args: str, check=True, env=None):
    path = tmp_path / "program.py"
    path.write_text(script)
    proc = run([python, "-m", "hatch_precompile", "snoop", "--json", *args, "--", "python", path], cwd=tmp_path,
               check=check, env=env)
    return proc, json.loads(proc.stdout[proc.stdout.index('{\n "format"'):])


def test_workload_shapes_are_all_served_by_the_shipped_artifacts(runtime_python, tmp_path):
    """With torch's own trace, rendered by tlparse (the test extra's: on PATH, as a user's would be)."""
    from hatch_precompile.builder import torch_trace

    tlparse = torch_trace.tlparse()
    assert tlparse, "the test extra installs tlparse"
    # The cache route (as on a torch without precompile entries: no shipped Dynamo cache entry
    # installed): each compiled function is traced, and its graphs come from the shipped caches.
    on_path = {"PATH": f"{os.path.dirname(tlparse)}{os.pathsep}{os.environ.get('PATH', '')}",
               **misbehaving("precompile-entry")}
    _, report = snoop(runtime_python, tmp_path, WORKLOAD_SHAPES, "--out", str(tmp_path / "report.json"),
                      "--trace", "trace", env=on_path)
    assert report["served"] == {}
    ours = [g for g in report["graphs"] if g["distribution"] == "sample-pkg"]
    # Training ran the exported step, compiling nothing; inference one graph, from the artifacts.
    assert report["steps"] == [{"package": "sample_pkg", "name": "loss", "route": "aotinductor", "calls": 1}]
    assert [g["grad_mode"] for g in ours] == [False] and {g["kind"] for g in ours} == {"forward"}
    assert all(g["from_cache"] and g["from_shipped"] for g in ours), ours
    assert all(g["location"].endswith("sample_pkg/model.py:30") and g["function"] == "forward" for g in ours)
    parcel = report["distributions"]["sample-pkg"]
    assert parcel["coverage"] == 1.0 and parcel["compiled_seconds"] == 0.0 and parcel["graphs"] == len(ours)
    assert report["gaps"] == [] and report["exit_code"] == 0
    assert json.loads((tmp_path / "report.json").read_text())["graphs"] == report["graphs"]
    seconds = [g["seconds"] for g in report["graphs"]]
    assert seconds == sorted(seconds, reverse=True)

    # torch's compile report: the page lists the package's compiled function, and links the graph
    # Dynamo made of it, with the model's convolution in it.
    trace = report["trace"]
    page = tmp_path / "trace" / "html" / "index.html"
    assert trace["html"] == [str(page)] and trace["tlparse"] == tlparse
    assert trace["lines"] == [f"torch's compile report (tlparse): {page}"]
    (forward,) = [g for g in ours if g["function"] == "forward"]
    html = page.read_text()
    assert f"{forward['location']} in forward" in html
    compile_dir = "-_{}_{}_0".format(*forward["compile_id"].split("/"))
    graphs = list((page.parent / compile_dir).glob("dynamo_output_graph_*.txt"))
    assert graphs and f"{compile_dir}/{graphs[0].name}" in html
    assert "torch.conv2d" in graphs[0].read_text() and "l_images_" in graphs[0].read_text()


def test_another_batch_size_is_a_gap_naming_the_function_and_both_shapes(runtime_python, tmp_path):
    _, report = snoop(runtime_python, tmp_path, BATCH_64)
    # Its Dynamo cache entry was installed, and its guards (batch 32) sent this call to Dynamo.
    assert report["served"]["sample_pkg.model.ConvNet.forward"].startswith("served: 1 guarded code(s)"), report["served"]
    fresh = [g for g in report["graphs"] if g["distribution"] == "sample-pkg" and not g["from_cache"]]
    assert fresh and not any(g["from_shipped"] for g in fresh)
    assert report["distributions"]["sample-pkg"]["coverage"] == 0.0
    (gap,) = report["gaps"]
    assert gap["function"] == "forward" and gap["location"].endswith("sample_pkg/model.py:30")
    assert gap["signature"]["inputs"][0] == {"name": "images", "shape": [64, 1, 28, 28],
                                                  "dtype": "torch.float32", "requires_grad": False}
    assert gap["signature"]["grad_mode"] is False
    assert {(tuple(s["inputs"][0]["shape"]), s["grad_mode"]) for s in gap["shipped"]} == {((32, 1, 28, 28), False)}
    assert gap["hint"] == (
        "the workload calls forward with images of shape [32, 1, 28, 28] only; this program used "
        "[64, 1, 28, 28] -- make that the workload's first call of forward (a later one compiles a dynamic "
        "graph), or mark dim 0 dynamic (torch._dynamo.mark_dynamic(images, 0))"
    )


def test_pitfalls_are_found_where_they_happen(runtime_python, tmp_path):
    proc, report = snoop(runtime_python, tmp_path, PITFALLS, check=False)
    assert proc.returncode == 3 and report["exit_code"] == 3, "snoop exits as the program did"
    program = str(tmp_path / "program.py")
    kinds = {(p["kind"], p["location"]) for p in report["pitfalls"]}
    assert ("float64 input", f"{program}:5") in kinds
    assert ("float64 in a compiled graph", f"{program}:6") in kinds
    (item,) = [p for p in report["pitfalls"] if p["kind"] == "graph break"]
    assert item["location"] == f"{program}:9" and "(.item())" in item["what"]
    assert "capture_scalar_outputs" in item["fix"]
    (restarted,) = [p for p in report["pitfalls"] if p["kind"] == "restarted trace"]
    assert restarted["location"] == f"{program}:8" and restarted["what"].startswith("threshold: ")
    assert " s of Dynamo tracing thrown away by a restart, at every start, warm ones too (" in restarted["what"]
    (recompile,) = [p for p in report["pitfalls"] if p["kind"] == "recompile"]
    assert recompile["location"] == f"{program}:13" and "size mismatch" in recompile["what"]
    assert "mark_dynamic" in recompile["fix"]
    assert all(g["distribution"] == "(program)" for g in report["graphs"])
    assert report["distributions"]["(program)"]["compiled_seconds"] > 0


def test_tmin_drops_the_small_graphs_and_text_output_shows_the_rest(runtime_python, tmp_path):
    path = tmp_path / "program.py"
    path.write_text(BATCH_64)
    proc = run([runtime_python, "-m", "hatch_precompile", "snoop", "--tmin", "1000", "--", "python", path],
               cwd=tmp_path)
    text = proc.stdout
    assert re.search(r"snoop: python \S+program.py exited 0; 0 graph\(s\) at or above 1000 s, 0 compiled fresh", text)
    assert "sample-pkg: " in text and "coverage 0% of its graphs served by its artifacts" in text


@pytest.mark.parametrize(
    ("command", "message"),
    [([], "give the program to run after --"),
     (["no-such-tool"], "'no-such-tool' is neither python (a script, -m module, -c code) nor a console script")],
)
def test_bad_commands_are_usage_errors(tmp_path, command, message):
    import sys

    proc = run([sys.executable, "-m", "hatch_precompile", "snoop", "--", *command], check=False, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stdout


TWO_BATCH_SIZES = """
import torch
import hatch_precompile
from sample_pkg.model import Trainer, make_batch, make_model


def workload():
    trainer = Trainer(make_model())
    for batch_size in (32, 64):  # the second size recompiles with the batch dim dynamic
        trainer.predict(make_batch(batch_size)[0])
"""
MARKED_64 = BATCH_64.replace("trainer.predict(", "images = sample_pkg.make_batch(batch_size=64)[0]\n"
                             "import torch; torch._dynamo.mark_dynamic(images, 0)\ntrainer.predict(images)\n#")


def test_a_dynamic_graph_in_the_artifacts_needs_the_dim_marked_in_a_new_process(runtime_python, tmp_path):
    """Dynamo compiles a new process's first call static: the workload's automatic-dynamic graph
    serves it only when the program marks the dim dynamic, and snoop says so."""
    from conftest import build_wheel, unpack

    from integration.test_build_errors import WORKLOAD_TABLE, project_with

    _, wheel = build_wheel(project_with(tmp_path / "src", WORKLOAD_TABLE, TWO_BATCH_SIZES), tmp_path / "dist")
    site = unpack(wheel, tmp_path / "site")
    reports = {}
    for name, script in (("static", BATCH_64), ("marked", MARKED_64)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "program.py").write_text(script)
        proc = run([runtime_python, "-m", "hatch_precompile", "snoop", "--json", "--", "python", "program.py"],
                   cwd=tmp_path / name, env={"PYTHONPATH": str(site)})
        reports[name] = json.loads(proc.stdout[proc.stdout.index("{\n"):])
    (gap,) = reports["static"]["gaps"]
    assert any(isinstance(d, str) for s in gap["shipped"] for d in s["inputs"][0]["shape"])
    assert gap["hint"].startswith("the artifacts hold forward with images dim 0 dynamic ")
    assert "mark that dim dynamic before the call (torch._dynamo.mark_dynamic(images, 0))" in gap["hint"]
    assert reports["marked"]["gaps"] == [] and reports["marked"]["distributions"]["sample-pkg"]["coverage"] == 1.0


def test_the_program_keeps_the_users_temp_dir_and_a_second_snoop_probes_no_isa(runtime_python, tmp_path):
    """Only the cache dir is fresh: torch's probe of each vector ISA (a g++ run each, once per cache
    dir) is answered from the memo of probes that passed on this machine, and the prefix header stays
    in the user's temp dir, where torch keeps it; so a graph's seconds are its own compile."""
    from integration.test_build_errors import logging_gxx

    path, log = logging_gxx(tmp_path)
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**path, "XDG_CACHE_HOME": str(tmp_path / "user-cache"), "TMPDIR": str(temp)}
    linked, headers = [], []
    for _ in ("first", "second"):
        log.write_text("")
        proc, report = snoop(runtime_python, tmp_path, ONE_KERNEL, env=env)
        assert json.loads(re.search(r'^\{"temp": .*\}$', proc.stdout, re.M).group())["temp"] == str(temp)
        lines = log.read_text().splitlines()
        linked.append(sum(" -shared " in f" {line} " for line in lines))
        headers.append(sum(".gch" in line for line in lines))  # built, not only included
        (graph,) = report["graphs"]
        assert not graph["from_cache"] and graph["distribution"] == "(program)"
    # The first run probes each ISA this CPU may have and links the program's one kernel; the
    # second links only the kernel, and builds no prefix header.
    assert linked[0] > 1 and linked[1] == 1 and headers[1] == 0, (linked, headers)
    assert list(temp.glob("torchinductor_*/precompiled_headers/*"))
