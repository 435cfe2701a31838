"""The exported route: an inference step ships as an AOTInductor package and runs without the compiler.

One wheel of tests/step_pkg (its ``classify`` step is saved under no_grad, in eval(), with a dynamic
batch) serves every test here: its contents, a fresh process that must import neither Dynamo nor
Inductor nor start a compiler, the caller's weights, the contract's fallbacks, the tools.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import pytest
import torch
from conftest import run, run_step_pkg, unpack

from integration.test_touchpoints import misbehaving

pytestmark = pytest.mark.slow

SERVE = r'''
import json, os, sys, time
started = time.perf_counter()
import torch
if os.environ.get("THREADS"):
    torch.set_num_threads(int(os.environ["THREADS"]))
import step_pkg
from step_pkg.model import classify
out = {"threads": torch.get_num_threads()}
model = step_pkg.make_model().eval()
step = step_pkg.classify_step
def call(*args):
    result = step(*args)
    return result, step.route, step.reason
with torch.no_grad():
    for n in (5, 1, 256):
        x = step_pkg.make_batch(n)[0]
        result, route, reason = call(model, x)
        out[f"batch {n}"] = [route, reason, (result - classify(model, x)).abs().max().item()]
    x = step_pkg.make_batch(7)[0]
    other = step_pkg.make_model(seed=3).eval()
    model.load_state_dict(other.state_dict())  # weights read at run time: the next call computes with them
    result, route, _ = call(model, x)
    out["load_state_dict"] = [route, (result - classify(other, x)).abs().max().item()]
    model.net[0].weight.mul_(1.5)  # in place, as an optimizer step would
    result, route, _ = call(model, x)
    out["in place"] = [route, (result - classify(model, x)).abs().max().item()]
    model.net[3].weight = torch.nn.Parameter(model.net[3].weight * 2)  # a new parameter object
    result, route, _ = call(model, x)
    out["new parameter"] = [route, (result - classify(model, x)).abs().max().item()]
    weights = other.state_dict()  # a checkpoint's tensors, no module: what a server without the model code passes
    result, route, _ = call(weights, x)
    out["mapping"] = [route, (result - classify(other, x)).abs().max().item()]
out["compiler modules"] = sorted(m for m in sys.modules if m.split(".")[:2] in (["torch", "_dynamo"], ["torch", "_inductor"]))
out["seconds"] = time.perf_counter() - started
print(json.dumps(out))
'''

FALLBACKS = r'''
import json, torch, step_pkg
from step_pkg.model import MLP, classify
model = step_pkg.make_model().eval()
x = step_pkg.make_batch(4)[0]
step = step_pkg.classify_step
out = {}
def case(name, *args, grad=False):
    with torch.set_grad_enabled(grad):
        result = step(*args)
        want = classify(*args)
    out[name] = [step.route, step.reason, (result - want).abs().max().item()]
case("as exported", model, x)
case("batch 300", model, step_pkg.make_batch(300)[0])
case("float64", model.double(), x.double()); model.float()
model.train(); case("train mode", model, x); model.eval()
case("grad enabled", model, x, grad=True)
wider = MLP(); wider.net[1] = torch.nn.ReLU(); wider.eval()
case("another submodule", wider, x)
case("not contiguous", model, torch.randn(32, 4).t())
case("as exported again", model, x)
other = step_pkg.make_model(seed=5).eval()
other.net[2].eps = 1e-3  # a setting the trace read: refused, and nothing of `other` bound
case("eps changed", other, x)
other.net[2].eps = 1e-5
case("eps put back", other, x)  # served with other's weights, not the last ones bound
print(json.dumps(out))
'''


TRAIN = r'''
import copy, json, sys, warnings
import torch
import step_pkg
from step_pkg import loss_step, make_tagger, tagging_loss
out = {}
def grads(a, b):
    return {n: None if p.grad is None else (p.grad - q.grad).abs().max().item()
            for (n, p), q in zip(a.named_parameters(), b.parameters())}
def buffers(a, b):
    return max((s.double() - t.double()).abs().max().item() for s, t in zip(a.buffers(), b.buffers()))
x, y = step_pkg.make_batch(9, seed=4)  # a batch size the workload never used
model = make_tagger(seed=3).train()  # other weights than the build's
eager = copy.deepcopy(model)
for m in (model, eager):
    m.head.weight.grad = torch.ones_like(m.head.weight)  # a gradient already there: added to
loss = loss_step(model, x, y)
want = tagging_loss(eager, x, y)
want.backward()
out["first"] = [loss_step.route, loss_step.reason, abs(loss.item() - want.item()), loss.requires_grad]
out["compiler"] = sorted(m for m in sys.modules if m.startswith(("torch._dynamo", "torch._inductor")))
out["grads"], out["buffers"] = grads(model, eager), buffers(model, eager)
optimizer, eager_optimizer = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(eager.parameters(), lr=0.1)
routes = set()
for i in range(20):
    xb, yb = step_pkg.make_batch(4 + i % 5, seed=10 + i)
    optimizer.zero_grad()
    loss_step(model, xb, yb)
    optimizer.step()
    routes.add(loss_step.route)
    eager_optimizer.zero_grad()
    tagging_loss(eager, xb, yb).backward()
    eager_optimizer.step()
out["sgd"] = [sorted(routes), max((p - q).abs().max().item() for p, q in zip(model.parameters(), eager.parameters())),
              buffers(model, eager)]
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    model.eval(), eager.eval(), model.zero_grad(), eager.zero_grad()
    loss = loss_step(model, x, y)  # the author's planned refusal: the fallback, then backward()
    want = tagging_loss(eager, x, y)
    want.backward()
    out["eval"] = [loss_step.route, loss_step.reason, abs(loss.item() - want.item()),
                   max(v for v in grads(model, eager).values() if v is not None)]
    out["eval warnings"] = [str(w.message) for w in seen if w.category.__name__ == "PrecompileWarning"]
print(json.dumps(out))
'''


def serve(site: Path, cache: Path, code: str = SERVE, env: dict | None = None) -> dict:
    cache.mkdir(parents=True, exist_ok=True)
    full = {"PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": str(cache), **(env or {})}
    proc = run([sys.executable, "-c", code], env=full, cwd=cache.parent)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def manifest_of(site: Path) -> dict:
    (path,) = (site / "step_pkg" / "_precompiled" / "sets").glob("*/manifest.json")
    return json.loads(path.read_text())


def test_an_inference_step_ships_as_an_exported_package_without_its_weights(step_wheel, step_site):
    manifest = manifest_of(step_site)
    step = manifest["steps"]["classify"]
    assert step["route"] == "aotinductor" and step["torch"] == torch.__version__
    (dim,) = [d for d in step["inputs"][0] if isinstance(d, str)]
    assert step["inputs"][0] == [dim, 32] and step["ranges"][dim] == [1, 256]
    assert {"steps/classify.json", "steps/classify.pt2"} <= set(manifest["files"])
    blobs = step_site / "step_pkg" / "_precompiled" / "blobs"
    contract = json.loads((blobs / manifest["files"]["steps/classify.json"]["sha256"]).read_text())
    # What its model library needs of the system, read by the build (pyelftools), checked at load.
    assert "libc.so.6" in contract["export"]["libraries"] and contract["export"]["cpu_features"]
    # Opened and run first by a process of its own; load_step opens it only where this holds.
    assert contract["proofs"] == [{"torch": torch.__version__, "device": "cpu", "cuda": torch.version.cuda}]
    package = (step_site / "step_pkg" / "_precompiled" / "blobs" / manifest["files"]["steps/classify.pt2"]["sha256"]).read_bytes()
    sys.path.insert(0, str(step_site))
    try:
        from step_pkg.model import make_model
    finally:
        sys.path.pop(0)
    for name, weight in make_model().state_dict().items():  # the workload's own weights (seed 0)
        if weight.unique().numel() == 1:
            continue  # LayerNorm's ones and zeros are in any file
        head = struct.pack(f"<{min(16, weight.numel())}f", *weight.flatten()[:16].tolist())
        assert head not in package, f"{name} is in the package"


def test_the_exported_step_serves_a_fresh_process_without_the_compiler(step_site, tmp_path):
    home = tmp_path / "home"  # a fresh container: nothing remembered, nothing probed
    home.mkdir()
    compiler = tmp_path / "bin" / "g++"  # any start of a compiler leaves a trace and fails
    compiler.parent.mkdir()
    compiler.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'compiler-ran'}\nexit 1\n")
    compiler.chmod(0o755)
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "CXX": str(compiler),
           "PATH": f"{compiler.parent}:{os.environ['PATH']}"}
    out = serve(step_site, tmp_path / "cache", env=env)
    assert out["compiler modules"] == []
    assert not (tmp_path / "compiler-ran").exists()
    for case in ("batch 5", "batch 1", "batch 256"):
        route, reason, error = out[case]
        assert route == "aotinductor" and reason is None and error < 1e-6, (case, out[case])
    for case in ("load_state_dict", "in place", "new parameter", "mapping"):
        route, error = out[case]
        assert route == "aotinductor" and error < 1e-6, (case, out[case])


@pytest.mark.parametrize("threads", [{"OMP_NUM_THREADS": "1"}, {}, {"THREADS": "8"}], ids=["1", "2", "8"])
def test_the_exported_step_runs_at_the_process_thread_count(step_site, tmp_path, threads):
    out = serve(step_site, tmp_path / "cache", env=threads)
    assert out["threads"] == {"OMP_NUM_THREADS": 1, "THREADS": 8}.get(next(iter(threads), ""), torch.get_num_threads())
    for case in ("batch 5", "batch 1", "batch 256"):
        assert out[case][0] == "aotinductor" and out[case][2] < 1e-6, (case, out[case])


def test_a_call_outside_the_contract_runs_the_fallback_with_the_reason(step_site, tmp_path):
    out = serve(step_site, tmp_path / "cache", FALLBACKS)
    for case in ("as exported", "as exported again", "eps put back"):
        route, reason, error = out[case]
        assert route == "aotinductor" and reason is None and error < 1e-6, (case, out[case])
    says = {
        "batch 300": "input 0: dim 0 is 300, outside the exported range 1..256",
        "float64": "input 0: torch.float64 on cpu, exported for torch.float32 on cpu",
        "train mode": "argument 0 is in train() mode; the step was exported in eval()",
        "grad enabled": "the process modes {'grad': True",
        "another submodule": "argument 0 differs from the export's: its submodules (names or classes)",
        "not contiguous": "input 0: not contiguous, exported for a contiguous tensor",
        "eps changed": "argument 0's net.2.eps: 1e-05 at build, 0.001 now",
    }
    for case, reason in says.items():
        route, why, error = out[case]
        assert route == "fallback" and why.startswith(reason), (case, out[case])
        assert error < 1e-5, (case, out[case])  # a failed shortcut costs time, never correctness


def test_a_training_step_runs_its_exported_forward_and_backward_as_loss_backward_would(step_site, tmp_path):
    out = serve(step_site, tmp_path / "cache", TRAIN)
    route, reason, error, requires_grad = out["first"]
    assert route == "aotinductor" and reason is None and error < 1e-6 and requires_grad is False
    assert out["compiler"] == []  # neither Dynamo nor Inductor imported by the shipped step
    assert out["grads"].pop("body.0.weight") is None  # frozen: no gradient, as eager leaves it
    assert all(diff is not None and diff < 1e-5 for diff in out["grads"].values()), out["grads"]
    assert out["buffers"] < 1e-5  # BatchNorm's running statistics, written into the caller's buffers
    routes, parameters, statistics = out["sgd"]
    assert routes == ["aotinductor"] and parameters < 1e-4 and statistics < 1e-4
    route, reason, error, grad_error = out["eval"]
    assert route == "fallback" and reason == "argument 0 is in eval() mode; the training step was exported in train()"
    assert error < 1e-5 and grad_error < 1e-5
    assert out["eval warnings"] == []


def test_a_damaged_package_falls_back_with_the_reason(step_site, tmp_path):
    site = tmp_path / "site"
    import shutil

    shutil.copytree(step_site, site)
    manifest = manifest_of(site)
    blob = site / "step_pkg" / "_precompiled" / "blobs" / manifest["files"]["steps/classify.pt2"]["sha256"]
    blob.write_bytes(blob.read_bytes()[:-10])
    code = ("import json, torch, step_pkg\nm = step_pkg.make_model().eval(); x = step_pkg.make_batch()[0]\n"
            "with torch.no_grad(): step_pkg.classify_step(m, x)\n"
            "print(json.dumps([step_pkg.classify_step.route, step_pkg.classify_step.reason]))")
    route, reason = serve(site, tmp_path / "cache", code)
    assert route == "fallback" and "steps/classify.pt2 does not match its sha256" in reason


def test_report_lists_the_exported_step_with_its_ranges(step_wheel):
    proc = run([sys.executable, "-m", "hatch_precompile", "report", step_wheel])
    assert "classify: aotinductor, captured with torch " in proc.stdout
    assert "1..256, 32]" in proc.stdout


def test_verify_runs_the_exported_step_against_eager(step_site, tmp_path):
    # Exit 1 on torch 2.13: the training step's resume graph after its backward() misses on replay
    # (its shipped AOTAutograd entry is there and torch does not use it; so before exported steps).
    proc = run([sys.executable, "-m", "hatch_precompile", "verify", "step_pkg", "--json"],
               env={"PYTHONPATH": str(step_site)}, cwd=tmp_path, check=False)
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    (classify,) = [s for s in result["steps"] if s["name"] == "classify"]
    assert classify == {"name": "classify", "route": "aotinductor", "reason": None, "problems": [], "shipped": True}
    assert not [miss for miss in result["misses"] if miss.startswith("step ")], result["misses"]


def test_snoop_counts_the_calls_the_exported_step_served(step_site, tmp_path):
    program = ("import torch, step_pkg\nm = step_pkg.make_model().eval()\n"
               "with torch.no_grad():\n    for n in (3, 4, 300): step_pkg.classify_step(m, step_pkg.make_batch(n)[0])\n")
    proc = run([sys.executable, "-m", "hatch_precompile", "snoop", "--", sys.executable, "-c", program],
               env={"PYTHONPATH": str(step_site)}, cwd=tmp_path)
    assert "step_pkg:classify: 2 call(s) by aotinductor" in proc.stdout
    assert "step_pkg:classify: 1 call(s) by fallback" in proc.stdout


@pytest.mark.skipif(hasattr(torch.compiler, "precompile"), reason="this torch can capture training steps")
def test_training_steps_a_torch_cannot_capture_fall_back_warm(step_wheel, step_site, tmp_path):
    """On a torch without torch.compiler.precompile (before 2.14) the same package builds, says which
    steps it could not capture, and those run torch.compile, warm from the shipped caches."""
    manifest = manifest_of(step_site)
    assert set(manifest["steps"]) == {"classify", "loss"}  # train_step and predict were not captured here
    (tmp_path / "run").mkdir()
    result = run_step_pkg(sys.executable, tmp_path / "run" / "cache", pythonpath=step_site)
    assert result["precompiled"] and result["routes"] == ["fallback", "fallback"]
    assert all("no step named" in reason for reason in result["reasons"])
    assert result["kernels_compiled"] == 0  # the workload warmed the torch.compile path they fall back to
    route, _, got, want = result["other_shape"]
    assert route == "fallback" and got == pytest.approx(want, rel=1e-6)
    assert result["classify"][:2] == ["aotinductor", None]


CRASHING_PROJECT = {
    "pyproject.toml": """[build-system]
requires = ["hatchling", "hatch-precompile"]
build-backend = "hatchling.build"

[project]
name = "crash-pkg"
version = "0.1.0"
dependencies = ["torch>=2.7", "hatch-precompile"]

[tool.hatch.build.hooks.precompile]
workload = "crash_pkg:workload"
""",
    "crash_pkg/__init__.py": """import torch
import hatch_precompile

hatch_precompile.load(__name__)


def classify(model, x):
    return model(x).softmax(-1)


classify_step = hatch_precompile.load_step(__name__, "classify", classify)


def workload():
    model = torch.nn.Linear(8, 3).eval()
    with torch.no_grad():
        hatch_precompile.save_step("classify", classify, model, torch.randn(4, 8))  # on_failure="error"
        classify_step.fallback(model, torch.randn(4, 8))
""",
}

CALL_CRASH_PKG = r"""
import json, torch, crash_pkg
from torch._dynamo.utils import counters
model = torch.nn.Linear(8, 3).eval()
x = torch.randn(4, 8)
with torch.no_grad():
    got = crash_pkg.classify_step(model, x)
print(json.dumps([crash_pkg.classify_step.route, (got - crash_pkg.classify(model, x)).abs().max().item(),
                  dict(counters["aot_autograd"]), dict(counters["inductor"])]))
"""


def test_a_loader_that_crashes_its_prover_leaves_the_build_whole_and_the_step_warm(tmp_path):
    """torch's AOTInductor loader segfaults on some machines (an H200 with torch 2.11): here a
    breaker makes it really crash (SIGSEGV) in every process that opens a package. pip's build
    goes on, says so in one line, and ships the step's warm fallback instead of the package."""
    project = tmp_path / "crash_pkg"
    for name, text in CRASHING_PROJECT.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    proc = run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist",
                project], env={**misbehaving("aoti-loader-crash"), "HATCH_PRECOMPILE_NO_STEPS": "0"})
    (line,) = [line for line in proc.stdout.splitlines() if "AOTInductor loader crashed" in line]
    assert f"step 'classify' not captured: torch {torch.__version__}'s AOTInductor loader crashed (SIGSEGV)" in line
    assert "on the CPU, in a process of its own" in line
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    site = unpack(wheel, tmp_path / "site")
    (manifest,) = (site / "crash_pkg" / "_precompiled" / "sets").glob("*/manifest.json")
    files = json.loads(manifest.read_text())["files"]
    assert not [f for f in files if f.startswith("steps/")]
    (tmp_path / "cache").mkdir()
    proc = run([sys.executable, "-c", CALL_CRASH_PKG], cwd=tmp_path,
               env={"PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    route, error, aot, inductor = json.loads(proc.stdout.strip().splitlines()[-1])
    assert route == "fallback" and error < 1e-6
    assert inductor.get("fxgraph_cache_hit", 0) + aot.get("autograd_cache_hit", 0) >= 1, (aot, inductor)
    assert not inductor.get("fxgraph_cache_miss") and not aot.get("autograd_cache_miss"), (aot, inductor)
