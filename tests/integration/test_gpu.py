"""The CUDA path on a real GPU: the key, a warm start that compiles no Triton kernel, fork safety.

Marked ``cuda``; skipped where torch sees no GPU (CI has none). Their last run on a GPU machine,
command and output, is in docs/guide/gpu.md. Runs with the interpreter that runs pytest (it must have a
CUDA torch, hatchling and build); every compile happens in a fresh process with an empty cache dir.
"""

from __future__ import annotations

import json
import math
import sys

import pytest
from conftest import ROOT, build_wheel, copy_project, has_cuda, run, unpack

COUNTER = ROOT / "bench" / "gpu_count"  # sitecustomize.py: counts Triton compiles and autotune benchmarks

pytestmark = [pytest.mark.slow, pytest.mark.cuda, pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU (CI has none)")]


@pytest.fixture(scope="module", autouse=True)
def gpus_visible():
    """Every other test runs its processes with the GPUs hidden; these need them (from the build on)."""
    import conftest

    conftest.GPUS_VISIBLE = True
    yield
    conftest.GPUS_VISIBLE = False

FIRST_STEP = r"""
import json, torch
import sample_pkg
initialized = torch.cuda.is_initialized()
trainer = sample_pkg.Trainer(sample_pkg.make_model())
images, labels = sample_pkg.make_batch()
loss = trainer.step(images, labels).item()
out = trainer.predict(images).double().sum().item()
from torch._dynamo.utils import counters
print(json.dumps({"loaded": bool(sample_pkg.precompile_status), "reason": sample_pkg.precompile_status.reason,
                  "cuda_initialized_by_import": initialized, "device": str(images.device), "loss": loss, "out": out,
                  "aot": dict(counters["aot_autograd"]), "inductor": dict(counters["inductor"])}))
"""


def first_step(site, tmp_path, name, env=None) -> dict:
    """The sample's first step and inference in a fresh process; with what it compiled, counted."""
    run_dir = tmp_path / name
    (run_dir / "home").mkdir(parents=True)
    count = run_dir / "count"
    proc = run([sys.executable, "-c", FIRST_STEP], env={
        "PYTHONPATH": f"{site}:{COUNTER}", "TORCHINDUCTOR_CACHE_DIR": str(run_dir / "cache"),
        "HOME": str(run_dir / "home"), "GPU_COUNT_FILE": str(count), **(env or {}),
    })
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    events = [line.split()[0] for line in count.read_text().splitlines()] if count.is_file() else []
    result["triton_compiles"] = events.count("triton_compile")
    result["autotune_benchmarks"] = events.count("autotune_benchmark")
    result["unpatched"] = [e for e in events if e.startswith("unpatched")]
    result["events"] = count.read_text() if count.is_file() else ""
    return result


@pytest.fixture(scope="module")
def gpu_site(tmp_path_factory):
    """sample_pkg built precompiled on this GPU, unpacked at another path than the build's."""
    project = copy_project(tmp_path_factory.mktemp("gpu-src") / "sample_pkg")
    proc, wheel = build_wheel(project, tmp_path_factory.mktemp("gpu-dist"))
    print(proc.stdout[-3000:])
    return unpack(wheel, tmp_path_factory.mktemp("gpu-site")), proc.stdout


def test_key_names_the_gpu_as_cuda_does_without_initialising_it():
    code = (
        "import json, torch\nfrom hatch_precompile.run.sets import environment_key\nkey = environment_key.current(torch)\n"
        "initialized = torch.cuda.is_initialized()\np = torch.cuda.get_device_properties(0)\n"
        "print(json.dumps([key, initialized, p.name, f'{p.major}.{p.minor}', torch.version.cuda]))"
    )
    key, initialized, name, capability, cuda = json.loads(run([sys.executable, "-c", code]).stdout.splitlines()[-1])
    assert initialized is False
    assert (key["gpu"], key["gpu_capability"], key["cuda"]) == (name, capability, cuda)
    assert key["triton"]


def test_gpu_build_ships_triton_kernels_in_graph_entries_not_the_triton_dir(gpu_site):
    site, log = gpu_site
    (manifest_file,) = (site / "sample_pkg" / "_precompiled" / "sets").glob("*/manifest.json")
    manifest = json.loads(manifest_file.read_text())
    assert manifest["env"]["gpu"] and manifest["env"]["gpu_capability"]
    assert not [p for p in manifest["files"] if p.startswith("inductor/triton/")]
    assert "GPU " in log and "compute capability" in log


def test_warm_start_compiles_no_triton_kernel_and_runs_no_autotuning(gpu_site, tmp_path):
    site, _ = gpu_site
    cold = first_step(site, tmp_path, "cold", {"PRECOMPILE": "0"})
    warm = first_step(site, tmp_path, "warm")
    assert cold["device"] == warm["device"] == "cuda:0"
    assert not cold["unpatched"] and not warm["unpatched"]
    assert cold["triton_compiles"] > 0 and cold["aot"].get("autograd_cache_miss", 0) >= 2  # the counter counts
    assert warm["loaded"], warm["reason"]
    assert warm["aot"].get("autograd_cache_hit", 0) >= 1 and warm["aot"].get("autograd_cache_miss", 0) == 0
    assert warm["inductor"].get("fxgraph_cache_miss", 0) == 0
    assert warm["triton_compiles"] == 0 and warm["autotune_benchmarks"] == 0, warm["events"]
    assert warm["loss"] == cold["loss"]
    assert math.isclose(warm["out"], cold["out"], rel_tol=1e-4)


def test_import_leaves_cuda_uninitialised_so_forked_children_can_use_it(gpu_site, tmp_path):
    site, _ = gpu_site
    code = (
        "import os, sys, torch\nimport sample_pkg\nassert sample_pkg.precompile_status, sample_pkg.precompile_status\n"
        "assert not torch.cuda.is_initialized()\npid = os.fork()\n"
        "if pid == 0:\n    os._exit(0 if torch.ones(4, device='cuda').sum().item() == 4 else 1)\n"
        "_, status = os.waitpid(pid, 0)\nsys.exit(os.waitstatus_to_exitcode(status))"
    )
    run([sys.executable, "-c", code], env={"PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c")})


def test_device_cpu_builds_cpu_artifacts_on_a_gpu_machine(tmp_path):
    project = copy_project(tmp_path / "sample_pkg")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'device = "cpu"\n')
    _, wheel = build_wheel(project, tmp_path / "dist")
    site = unpack(wheel, tmp_path / "site")
    (manifest_file,) = (site / "sample_pkg" / "_precompiled" / "sets").glob("*/manifest.json")
    env = json.loads(manifest_file.read_text())["env"]
    assert env["gpu"] is None and env["triton"] is None
    cpu = first_step(site, tmp_path, "cpu-only", {"CUDA_VISIBLE_DEVICES": ""})
    assert cpu["loaded"] and cpu["device"] == "cpu" and cpu["aot"].get("autograd_cache_miss", 0) == 0
    with_gpu = first_step(site, tmp_path, "gpu-visible")
    assert not with_gpu["loaded"] and "gpu" in with_gpu["reason"]
