"""The newest torch's steps, end to end (test_newest_torch.py is the sample's flow on it): from torch
2.14, steps shipped with save_step() run with no Dynamo and fall back where they must; a step
exported on the suite's torch is proven by this one by `bake`, shipped as it is, and served.
``HATCH_PRECOMPILE_TEST_TORCH`` names another requirement; set it empty to skip.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import zipfile
from pathlib import Path

import pytest
from conftest import STEP_PKG, copy_project, run, run_step_pkg, venv_with_torch

from integration.test_install_flow import find_links
from integration.test_newest_torch import REQUIREMENT
from integration.test_touchpoints import MISBEHAVE

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes


@pytest.mark.skipif(not REQUIREMENT, reason="HATCH_PRECOMPILE_TEST_TORCH is empty")
def test_newest_torch_ships_steps_past_dynamo_and_serves_a_step_proven_by_bake(hp_dist, step_wheel, runtime_python):
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-newest-torch-steps-") as tmp:  # 5 GB: not kept
        tmp_path = Path(tmp)
        python, version = venv_with_torch(tmp_path / "venv", REQUIREMENT)
        links = find_links(hp_dist)["PIP_FIND_LINKS"]
        if run([python, "-c", "import torch; torch.compiler.precompile"], check=False).returncode == 0:
            assert_steps_ship_past_dynamo(python, tmp_path, links)
        assert_an_exported_step_proven_on_this_torch_serves_it(python, tmp_path, step_wheel, version, runtime_python)
        shutil.rmtree(tmp_path / "venv")


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
