"""Installing the precompiled wheel elsewhere and starting warm; skipping safely when unusable."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from conftest import run, run_sample, unpack


@pytest.fixture(scope="session")
def cold_result(runtime_python, tmp_path_factory) -> dict:
    cache = tmp_path_factory.mktemp("cold") / "cache"
    cache.mkdir()
    return run_sample(runtime_python, cache, env={"PRECOMPILE": "0"})


def so_files(cache):
    return sorted(p.relative_to(cache) for p in cache.rglob("*.so"))


def test_warm_start_hits_every_cache_and_compiles_no_kernel(runtime_python, cold_result, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    warm = run_sample(runtime_python, cache)
    assert warm["precompiled"], warm["precompile_reason"]
    assert warm["aot_autograd"].get("autograd_cache_miss", 0) == 0
    assert warm["aot_autograd"]["autograd_cache_hit"] >= 2  # training and inference graphs
    assert warm["inductor"].get("fxgraph_cache_miss", 0) == 0
    assert warm["kernels_compiled"] == 0

    assert not cold_result["precompiled"] and cold_result["precompile_reason"] == "disabled by PRECOMPILE=0"
    assert cold_result["aot_autograd"]["autograd_cache_miss"] >= 2
    assert cold_result["kernels_compiled"] > 0
    # Same numbers as a cold compile: the shipped kernels are the kernels a cold compile builds.
    assert math.isclose(warm["loss"], cold_result["loss"], rel_tol=1e-6)
    assert math.isclose(warm["logits_sum"], cold_result["logits_sum"], rel_tol=1e-6, abs_tol=1e-5)


def test_load_never_clobbers_and_second_process_installs_nothing(runtime_python, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    code = "import json, sample_pkg; s = sample_pkg.precompile_status; print(json.dumps([s.installed, s.present]))"
    env = {"TORCHINDUCTOR_CACHE_DIR": str(cache)}
    first = json.loads(run([runtime_python, "-c", code], env=env).stdout.splitlines()[-1])
    assert first[0] > 0 and first[1] == 0
    kernel = next(cache.rglob("*.main.so"))
    kernel.write_bytes(b"somebody else's entry")
    second = json.loads(run([runtime_python, "-c", code], env=env).stdout.splitlines()[-1])
    assert second == [0, first[0]]
    assert kernel.read_bytes() == b"somebody else's entry"
    assert not list(cache.rglob("*.tmp"))


def test_shipped_torchscript_module_loads_and_matches_eager(runtime_python, tmp_path):
    code = (
        "import torch, sample_pkg\n"
        "m = sample_pkg.scripted_classifier()\n"
        "assert isinstance(m, torch.jit.ScriptModule), type(m)\n"
        "x = sample_pkg.make_batch()[0]\n"
        "torch.testing.assert_close(m(x), sample_pkg.make_model().eval()(x))\n"
        "import hatch_precompile\n"
        "assert hatch_precompile.load_torchscript('sample_pkg', 'missing') is None\n"
        "print('ok')\n"
    )
    proc = run([runtime_python, "-W", "always", "-c", code], env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    assert proc.stdout.splitlines()[-1] == "ok"
    assert "no TorchScript module named 'missing' was shipped" in proc.stdout


STATUS = "import sample_pkg; s = sample_pkg.precompile_status; print(s.loaded, '|', s.reason)"


def status_of(python, site, cache, env=None) -> tuple[str, str]:
    full_env = {"PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": str(cache), **(env or {})}
    proc = run([python, "-W", "always", "-c", STATUS], env=full_env)
    loaded, reason = proc.stdout.splitlines()[-1].split(" | ", 1)
    return loaded, reason, proc.stdout


@pytest.fixture
def unpacked(precompiled_wheel, tmp_path):
    return unpack(precompiled_wheel[0], tmp_path / "site")


def test_altered_artifact_is_never_installed(runtime_python, unpacked, tmp_path):
    manifest = json.loads((unpacked / "sample_pkg/_precompiled/manifest.json").read_text())
    victim = next(p for p in manifest["files"] if p.endswith(".main.so"))
    path = unpacked / "sample_pkg/_precompiled" / victim
    path.write_bytes(path.read_bytes()[:-1])  # truncated
    cache = tmp_path / "cache"
    loaded, reason, output = status_of(runtime_python, unpacked, cache)
    assert loaded == "False"
    assert victim in reason and "does not match its sha256" in reason
    assert output.count("not using sample_pkg's precompiled caches") == 1
    assert not list(cache.rglob(path.name))


def test_unparsable_manifest_is_rejected(runtime_python, unpacked, tmp_path):
    (unpacked / "sample_pkg/_precompiled/manifest.json").write_text("{not json")
    loaded, reason, _ = status_of(runtime_python, unpacked, tmp_path / "cache")
    assert loaded == "False" and reason.startswith("manifest.json does not parse")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_isa_mismatch_is_refused_naming_the_field(runtime_python, unpacked, tmp_path):
    shipped = json.loads((unpacked / "sample_pkg/_precompiled/manifest.json").read_text())["env"]
    if shipped["cpu_capability"] == "DEFAULT":
        pytest.skip("this CPU has no vector ISA to turn off")
    loaded, reason, _ = status_of(runtime_python, unpacked, tmp_path / "cache", {"ATEN_CPU_CAPABILITY": "default"})
    assert loaded == "False"
    assert reason.startswith(f"built for cpu_capability={shipped['cpu_capability']!r}")
    assert "'DEFAULT'" in reason and "--no-build-isolation" in reason


def test_runtime_switch_skips_without_importing_torch(runtime_python, unpacked, tmp_path):
    code = (
        "import sys, hatch_precompile\n"
        "r = hatch_precompile.load('sample_pkg')\n"
        "print(r.loaded, r.reason, 'torch' in sys.modules)\n"
    )
    for env, reason in [
        ({"PRECOMPILE": "0"}, "disabled by PRECOMPILE=0"),
        ({"PRECOMPILE": "1", "PRECOMPILE_SAMPLE_PKG": "no"}, "disabled by PRECOMPILE_SAMPLE_PKG=no"),
    ]:
        full = {"PYTHONPATH": str(unpacked), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c"), **env}
        out = run([runtime_python, "-c", code], env=full).stdout.splitlines()[-1]
        assert out == f"False {reason} False"


def test_unwritable_cache_dir_skips_and_import_still_works(runtime_python, unpacked, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    loaded, reason, _ = status_of(runtime_python, unpacked, blocker / "cache")
    assert loaded == "False" and "cannot create the Inductor cache dir" in reason


def test_planted_symlink_in_cache_dir_is_not_followed(runtime_python, unpacked, tmp_path):
    cache = tmp_path / "cache"
    elsewhere = tmp_path / "elsewhere"
    cache.mkdir()
    elsewhere.mkdir()
    (cache / "aotautograd").symlink_to(elsewhere)
    loaded, reason, _ = status_of(runtime_python, unpacked, cache)
    assert loaded == "False" and "is a symlink or not a directory" in reason
    assert not any(elsewhere.iterdir())
    shutil.rmtree(cache)
