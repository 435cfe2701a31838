"""The newest torch that installs quickly here, end to end (the suite's own torch is 2.13.0).

Every supported torch is proven by scripts/torch_matrix.py (docs/reference/torch-versions.md); CI runs
this one besides the default: the torch-first flow, the first step warm, outputs as cold; on a
CUDA build, that a changed Triton changes its key, and that Triton is hashed only where graphs are keyed on it;
from torch 2.14, steps shipped with save_step() run with no Dynamo and fall back where they must.
``HATCH_PRECOMPILE_TEST_TORCH`` names another requirement; set it empty to skip.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import pytest
from conftest import STEP_PKG, copy_project, install_torch, make_venv, own_copy, run, run_sample, run_step_pkg

from integration.test_runtime import NOTES, PREDICT
from integration.test_touchpoints import MISBEHAVE

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

REQUIREMENT = os.environ.get("HATCH_PRECOMPILE_TEST_TORCH", "torch==2.14.1")


@pytest.mark.skipif(not REQUIREMENT, reason="HATCH_PRECOMPILE_TEST_TORCH is empty")
def test_newest_torch_builds_installs_and_starts_warm(hp_dist, step_wheel, runtime_python):
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-newest-torch-") as tmp:  # 5 GB: not kept
        tmp_path = Path(tmp)
        python = make_venv(tmp_path / "venv")
        install_torch(python, REQUIREMENT)
        version = run([python, "-c", "import torch; print(torch.__version__)"]).stdout.strip().splitlines()[-1]
        links = " ".join([os.environ.get("PIP_FIND_LINKS", ""), str(hp_dist)]).strip()
        proc = run([python, "-m", "pip", "install", "-v", copy_project(tmp_path / "sample_pkg")],
                   env={"PIP_FIND_LINKS": links, "HATCH_PRECOMPILE_NO_STEPS": "0", "HATCH_PRECOMPILE_NO_DYNAMO_CACHE": "0"})
        assert f"precompile: building artifacts for torch {version} of the target environment" in proc.stdout
        results = {}
        for name, env in (("cold", {"PRECOMPILE": "0"}), ("warm", {})):
            (tmp_path / name).mkdir()
            results[name] = run_sample(python, tmp_path / name, env=env)
        cold, warm = results["cold"], results["warm"]
        assert warm["torch"] == version and warm["precompiled"], warm["precompile_reason"]
        # The compiled inference served untraced from its Dynamo cache entry, as on the suite's torch.
        assert warm["first_predict_phases"]["frames"] == 0, warm["served"]
        assert warm["served"]["sample_pkg.model.ConvNet.forward"].startswith("served: 1 guarded code(s)"), warm["served"]
        assert not warm["aot_autograd"].get("autograd_cache_miss")
        assert warm["kernels_compiled"] == 0 and cold["kernels_compiled"] > 0
        # The shipped kernels read the thread count when they run (built for any thread count); a
        # reduction split another way can round the last bits otherwise than the cold compile's
        # kernels with the count built in (seen on an AMD EPYC with 2.14.1: 1.3e-8 of the logits'
        # sum; bit for bit against a cold run with TORCHINDUCTOR_CPP_DYNAMIC_THREADS=1).
        assert warm["loss"] == pytest.approx(cold["loss"], rel=1e-6)
        assert warm["logits_sum"] == pytest.approx(cold["logits_sum"], rel=1e-6)
        assert_notes_only_what_this_torchs_keys_hold(python, tmp_path)
        if run([python, "-c", "import triton"], check=False).returncode == 0:  # a CUDA build's Triton
            assert_changed_triton_changes_the_key(python, tmp_path, cold)
        if run([python, "-c", "import torch; torch.compiler.precompile"], check=False).returncode == 0:
            assert_steps_ship_past_dynamo(python, tmp_path, links)
        assert_an_exported_step_proven_on_this_torch_serves_it(python, tmp_path, step_wheel, version, runtime_python)
        shutil.rmtree(tmp_path / "venv")


def assert_notes_only_what_this_torchs_keys_hold(python: Path, tmp_path: Path) -> None:
    """As test_runtime's on the suite's torch, read from this torch's own config: no note for
    TORCHINDUCTOR_COMPILE_THREADS=1 and the shipped graphs hit; a note for TORCHINDUCTOR_MAX_AUTOTUNE=1
    (whose miss, a max-autotune compile, is left to the suite's torch)."""
    for variable, noted in (("TORCHINDUCTOR_COMPILE_THREADS", False), ("TORCHINDUCTOR_MAX_AUTOTUNE", True)):
        (tmp_path / variable).mkdir()
        env = {variable: "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / variable)}
        if noted:
            notes = json.loads(run([python, "-c", NOTES], env=env, cwd=tmp_path).stdout.strip().splitlines()[-1])
            assert len(notes) == 1 and notes[0].startswith(f"{variable}=1 here and the graphs were compiled with it unset")
            continue
        proc = run([python, "-c", PREDICT], env=env, cwd=tmp_path)
        notes, hits, misses, traced, served = json.loads(proc.stdout.strip().splitlines()[-1])
        assert notes == [] and misses == 0 and (traced == 0 or hits >= 1), served


def assert_steps_ship_past_dynamo(python: Path, tmp_path: Path, links: str) -> None:
    """save_step / load_step on a torch with torch.compiler.precompile: the package's steps run
    captured, with no Dynamo and no kernel built; outside their contract, or with a damaged
    artifact, they fall back to torch.compile and compute the same."""
    proc = run([python, "-m", "pip", "install", "-v", copy_project(tmp_path / "step_pkg", STEP_PKG)],
               env={"PIP_FIND_LINKS": links, "HATCH_PRECOMPILE_NO_STEPS": "0"})
    assert "TorchScript module(s), 4 step(s) ahead of time;" in proc.stdout
    results = {}
    for name, env in (("steps-cold", {"PRECOMPILE": "0"}), ("steps-warm", {})):
        (tmp_path / name).mkdir()
        results[name] = run_step_pkg(python, tmp_path / name / "cache", env=env)
    cold, warm = results["steps-cold"], results["steps-warm"]
    assert cold["routes"] == ["fallback", "fallback"] and cold["dynamo_frames"] > 0 and cold["kernels_compiled"] > 0
    assert warm["routes"] == ["precompiled", "precompiled"], warm["reasons"]
    assert warm["dynamo_frames"] == 0 and warm["kernels_compiled"] == 0
    assert warm["classify"][:2] == ["aotinductor", None] and warm["classify"][2] < 1e-6, warm["classify"]
    assert warm["loss"] == pytest.approx(cold["loss"], rel=1e-6)
    assert warm["grad_norm"] == pytest.approx(cold["grad_norm"], rel=1e-6)
    assert warm["logits_sum"] == pytest.approx(cold["logits_sum"], rel=1e-5, abs=1e-5)
    route, reason, got, want = warm["other_shape"]  # another batch size
    assert route == "fallback" and "argument 1 differs from the capture's" in reason and got == pytest.approx(want, rel=1e-6)
    route, reason, got, want = warm["eval_mode"]
    assert route == "fallback" and "a train()/eval() mode" in reason and got == pytest.approx(want, rel=1e-5)
    assert_a_loss_step_torch_cannot_export_is_captured_by_precompile(python, tmp_path)

    # A damaged step: that step compiles as usual, the other still runs captured, import works.
    site = Path(run([python, "-c", "import step_pkg, os; print(os.path.dirname(step_pkg.__file__))"]).stdout.split()[-1])
    (manifest,) = (site / "_precompiled" / "sets").glob("*/manifest.json")
    digest = json.loads(manifest.read_text())["files"]["steps/train_step.py"]["sha256"]
    blob = site / "_precompiled" / "blobs" / digest
    blob.write_text(blob.read_text() + "\nraise SystemExit('not the shipped code')\n")
    (tmp_path / "steps-damaged").mkdir()
    damaged = run_step_pkg(python, tmp_path / "steps-damaged" / "cache")
    assert damaged["routes"] == ["fallback", "precompiled"]
    assert "does not match its sha256" in damaged["reasons"][0]
    assert damaged["loss"] == pytest.approx(cold["loss"], rel=1e-6)


# A loss step whose joint export fails (the joint-export touchpoint broken, as a torch that moved
# it would): the build says so and captures the loss with its backward by torch.compiler.precompile.
LOSS_BY_PRECOMPILE = """
import copy, json, os, pathlib, torch
import hatch_precompile
from step_pkg.model import TRAIN_BATCH, make_batch, make_tagger, tagging_loss
model, (x, y) = make_tagger().train(), make_batch()
path = hatch_precompile.save_step("loss", tagging_loss, model, x, y, backward=True,
                                  dynamic_shapes=(None, {0: TRAIN_BATCH}, {0: TRAIN_BATCH}))
record = json.loads(path.with_suffix(".json").read_text())
step = torch.compiler.precompile.load(path.read_text(), path.with_suffix(".cache").read_bytes())
eager = copy.deepcopy(model)
got = step(model, x, y)
want = tagging_loss(eager, x, y)
want.backward()
grads = max(float((a.grad - b.grad).abs().max()) for a, b in zip(model.parameters(), eager.parameters())
            if b.grad is not None)
frozen = model.body[0].weight.grad is None
print(json.dumps([record["route"], float(got), float(want), got.requires_grad, grads, frozen]))
"""


def assert_a_loss_step_torch_cannot_export_is_captured_by_precompile(python: Path, tmp_path: Path) -> None:
    out = tmp_path / "loss-steps"
    proc = run([python, "-c", LOSS_BY_PRECOMPILE], cwd=tmp_path,
               env={"HATCH_PRECOMPILE_STEPS_DIR": str(out), "HATCH_PRECOMPILE_NO_STEPS": "0",
                    "PYTHONPATH": str(MISBEHAVE), "MISBEHAVE": "joint-export"})
    assert ("step 'loss' (aotinductor route, forward and backward): torch " in proc.stdout
            and "capturing it with torch.compiler.precompile instead" in proc.stdout), proc.stdout
    route, got, want, needs_grad, grads, frozen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert route == "precompile" and got == pytest.approx(want, rel=1e-6) and not needs_grad
    assert grads < 1e-5 and frozen  # gradients in .grad as backward() leaves them, none for the frozen weight
    assert not (out / "loss.pt2").exists()


# The step's first call from a fresh process, and eager's (the same function, nothing compiled) just
# before it: the route, why not another, the answer's distance from eager's, the compiler modules.
SERVE_EXPORTED = """
import json, sys, time, torch, step_pkg
from step_pkg.model import classify
model = step_pkg.make_model().eval()
x = step_pkg.make_batch(9)[0]
with torch.no_grad():
    started = time.perf_counter(); want = classify(model, x); eager = time.perf_counter() - started
    started = time.perf_counter(); got = step_pkg.classify_step(model, x); first = time.perf_counter() - started
    error = (got - want).abs().max().item()
compiler = [m for m in sys.modules if m.startswith(("torch._dynamo", "torch._inductor"))]
print(json.dumps([step_pkg.classify_step.route, step_pkg.classify_step.reason, error, compiler, first, eager]))
"""


def assert_an_exported_step_proven_on_this_torch_serves_it(python: Path, tmp_path: Path, wheel: Path,
                                                           version: str, baker: Path) -> None:
    """The step_pkg wheel built on the suite's torch, baked under this one by hatch-precompile as users
    install it (a wheel in the site-packages beside the suite's torch: ``baker``, the runtime venv):
    its exported steps are proven by this torch and shipped for it as they are (the same bytes), not
    compiled again, each proof recorded once. A merge of the built and the baked wheel keeps both
    proofs. Each torch then serves the step from a fresh process with no compiler imported, its first
    call within a second of eager's (the fallback compiles for ten)."""
    out = tmp_path / "baked"
    proc = run([baker, "-m", "hatch_precompile", "bake", "-o", out, "--python", python, wheel],
               env={"HATCH_PRECOMPILE_NO_STEPS": "0"})
    for step in ("classify", "loss"):  # inference, and a training step's forward and backward
        assert (f"step '{step}': the package built on torch {torch_version()} loads and matches on torch {version}: "
                "shipped for it as it is") in proc.stdout
    (baked,) = out.glob("*.whl")
    by_torch = manifests_by_torch(baked)
    for step in ("classify", "loss"):
        assert by_torch[version]["steps"][step]["proven"] == [version]
        assert by_torch[version]["steps"][step]["torch"] == torch_version()
        assert [p["torch"] for p in by_torch[version]["steps"][step]["proofs"]] == [torch_version(), version]
    digests = {m["files"]["steps/classify.pt2"]["sha256"] for m in by_torch.values()}
    assert len(digests) == 1, "one package, stored once, serves both"
    run([baker, "-m", "hatch_precompile", "merge", "-o", tmp_path / "merged", wheel, baked])
    (merged,) = (tmp_path / "merged").glob("*.whl")
    assert {v: [p["torch"] for p in m["steps"]["classify"]["proofs"]] for v, m in manifests_by_torch(merged).items()} \
        == {torch_version(): [torch_version()], version: [torch_version(), version]}
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", merged])
    run([baker, "-m", "pip", "install", "-q", "--no-deps", "--target", tmp_path / "merged-site", merged])
    for side, server, pythonpath in (("this", python, None), ("suite", baker, tmp_path / "merged-site")):
        cache = tmp_path / f"proven-cache-{side}"
        env = {"TORCHINDUCTOR_CACHE_DIR": str(cache), **({"PYTHONPATH": str(pythonpath)} if pythonpath else {})}
        route, reason, error, compiler, first, eager = json.loads(
            run([server, "-c", SERVE_EXPORTED], env=env, cwd=tmp_path).stdout.strip().splitlines()[-1])
        assert route == "aotinductor" and reason is None and error < 1e-6 and compiler == [], (server, reason)
        assert first < eager + 1.0, (server, first, eager)


def manifests_by_torch(wheel: Path) -> dict[str, dict]:
    """The manifests of ``wheel``'s artifact sets, by the torch each set is for."""
    with zipfile.ZipFile(wheel) as archive:
        manifests = [json.loads(archive.read(n)) for n in archive.namelist() if n.endswith("/manifest.json")]
    return {m["env"]["torch"]: m for m in manifests}


def torch_version() -> str:
    import torch

    return torch.__version__


# After a warm step: whether Triton's key had been computed or started (torch 2.13+ keeps it in a
# prefetchable cache; None: another shape), then Triton's key as torch reads it, torch's system
# answer, and whether torch puts the key into this machine's graph keys (a CUDA build on a machine
# without a GPU leaves it out before torch 2.15: CPU kernels are C++).
TRITON_KEY = """
import inspect, json, torch.utils._functools as functools_
import sample_pkg
trainer = sample_pkg.Trainer(sample_pkg.make_model())
trainer.predict(sample_pkg.make_batch()[0])  # compiled: the training step is exported
from torch._inductor import codecache
state = inspect.getclosurevars(codecache.triton_key).nonlocals
sentinel = getattr(functools_, "_cache_sentinel", None)
hashed = (state["_cache"] is not sentinel or state["_future"] is not None) if {"_cache", "_future"} <= set(state) else None
key = codecache.triton_key()
system = codecache.CacheBase.get_system()
print(json.dumps({"key": key, "hashed_by_the_step": hashed, "system": system,
                  "in_graph_keys": (system.get("version") or {}).get("triton") == key}))
"""


# Triton's key where torch keys graphs on it (torch 2.15, or a GPU), through the memo the speedups
# use there: whether Triton's own key function ran (in any thread), and the key torch then holds.
MEMO_KEY = """
import json, sys, threading
seen = []
def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "triton_key" and "/triton/" in frame.f_code.co_filename:
        seen.append(1)
sys.setprofile(profile); threading.setprofile(profile)
from hatch_precompile.run import warm_shortcuts
from hatch_precompile.run.torch_internals import prefetch
prefetch.prefetch("triton-key", memo=warm_shortcuts.TritonKeyMemo())
from torch._inductor import codecache
key = codecache.triton_key()
sys.setprofile(None); threading.setprofile(None)
print(json.dumps({"key": key, "hashed": bool(seen)}))
"""


def assert_changed_triton_changes_the_key(python: Path, tmp_path: Path, cold: dict) -> None:
    """The speedups hash Triton's sources in the background, or not at all where torch leaves
    them out of the graphs' keys; where it keys on them, a remembered key is used only while
    every file of Triton is unchanged: a changed Triton changes the key. Where torch keys graphs
    on it, the shipped graphs (keyed by the build's Triton) then miss and compile; where it does
    not, they hit; the outputs are the cold ones either way."""
    def key(**env) -> dict:
        return json.loads(run([python, "-c", TRITON_KEY], env=env).stdout.strip().splitlines()[-1])

    def remembered() -> dict:
        env = {"XDG_CACHE_HOME": str(tmp_path / "user-cache")}
        return json.loads(run([python, "-c", MEMO_KEY], env=env).stdout.strip().splitlines()[-1])

    before, before_unpatched = key(), key(HATCH_PRECOMPILE_NO_PATCHES="1")
    first, second = remembered(), remembered()
    assert first["hashed"] and not second["hashed"] and first["key"] == second["key"] == before_unpatched["key"]
    assert before["key"] and before["key"] == before_unpatched["key"]
    # Torch's own answer, whether load() answered it without Triton's key or torch computed it.
    assert before["system"] == before_unpatched["system"] and before["in_graph_keys"] == before_unpatched["in_graph_keys"]
    # Torch hashes Triton for its first step; the speedups do too (in the background) where the
    # graphs are keyed on it, and not at all where they are not.
    assert before_unpatched["hashed_by_the_step"] in (True, None)
    assert before["hashed_by_the_step"] in ((True, None) if before["in_graph_keys"] else (False, None))
    triton = Path(run([python, "-c", "import triton, os; print(os.path.dirname(triton.__file__))"]).stdout.split()[-1])
    with own_copy(triton / "language" / "core.py").open("a") as source:  # this venv's own Triton: deleted after
        source.write("\n# changed after the wheel was built\n")
    after, after_unpatched = key(), key(HATCH_PRECOMPILE_NO_PATCHES="1")
    assert after["key"] != before["key"] and after["key"] == after_unpatched["key"]
    assert after["system"] == after_unpatched["system"]
    changed_memo = remembered()
    assert changed_memo["hashed"] and changed_memo["key"] == after_unpatched["key"]
    (tmp_path / "changed-triton").mkdir()
    changed = run_sample(python, tmp_path / "changed-triton")
    if after["in_graph_keys"]:
        assert changed["aot_autograd"].get("autograd_cache_miss") and changed["kernels_compiled"] > 0
    else:
        assert not changed["aot_autograd"].get("autograd_cache_miss") and changed["kernels_compiled"] == 0
    assert changed["loss"] == pytest.approx(cold["loss"], rel=1e-6)  # to the last bits: see the warm start's
    assert changed["logits_sum"] == pytest.approx(cold["logits_sum"], rel=1e-6)
