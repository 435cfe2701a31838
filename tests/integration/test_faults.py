"""The fault matrix of the load side on the real wheel, end to end: a fresh process imports the
package. The cases that need no real environment are in test_install.py, in-process."""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import subprocess
import time
import zipfile

import pytest
from conftest import TEST_USER_CACHE, blob, run, run_one_function, run_sample, set_manifest, unpack

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

STATUS = (
    "import json, sample_pkg; s = sample_pkg.precompile_status; "
    "print(json.dumps([s.loaded, s.reason, s.installed]))"
)


@pytest.fixture
def site(precompiled_wheel, tmp_path):
    """The precompiled wheel's files in a private dir that a test may damage."""
    return unpack(precompiled_wheel[0], tmp_path / "site")


def manifest_of(site) -> dict:
    return json.loads(set_manifest(site).read_text())


def write_manifest(site, data) -> None:
    set_manifest(site).write_text(json.dumps(data))


def load_status(python, site, cache, env=None):
    """(loaded, reason, files installed, full output) of `import sample_pkg` in a fresh process."""
    full_env = {"PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": str(cache), **(env or {})}
    proc = run([python, "-W", "always", "-c", STATUS], env=full_env)
    loaded, reason, installed = json.loads(proc.stdout.splitlines()[-1])
    return loaded, reason, installed, proc.stdout


def files_in(directory) -> list:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def assert_skipped(python, site, tmp_path, expected_reason, env=None):
    cache, user_cache, temp = tmp_path / "cache", tmp_path / "user-cache", tmp_path / "tmp"
    user_cache.mkdir()
    temp.mkdir()
    env = {"XDG_CACHE_HOME": str(user_cache), "TMPDIR": str(temp), **(env or {})}
    loaded, reason, installed, output = load_status(python, site, cache, env)
    assert loaded is False and installed == 0
    assert expected_reason in reason, reason
    assert output.count("not using sample_pkg's precompiled caches") == 1
    assert files_in(cache) == [], "a skipped load must leave the cache dir untouched"
    assert files_in(user_cache) == files_in(temp) == [], "nor write anywhere else"
    return reason


# -- compatibility -----------------------------------------------------------------------


def test_isa_mismatch_skips_then_compiles_normally(runtime_python, site, tmp_path):
    shipped = manifest_of(site)["env"]["cpu_capability"]
    if shipped == "DEFAULT":
        pytest.skip("this CPU has no vector ISA to turn off")
    env = {"ATEN_CPU_CAPABILITY": "default"}
    reason = assert_skipped(runtime_python, site, tmp_path, f"built for cpu_capability={shipped!r}", env)
    assert "this environment has cpu_capability='DEFAULT'" in reason and "rebuild the wheel for this environment" in reason
    # Torch's own recipe crashes here (avx512 kernel source built without its defines); we compile.
    # One function's compile shows it (the sample's whole cold compile, 40 s more, is cold_result's).
    cache = tmp_path / "cold-cache"
    cache.mkdir()
    result = run_one_function(runtime_python, cache, env=env, pythonpath=site)
    assert not result["precompiled"] and result["kernels_compiled"] > 0
    assert result["aot_autograd"]["autograd_cache_miss"] >= 1


def test_a_cpu_lacking_a_feature_the_kernels_may_use_is_refused(runtime_python, site, tmp_path):
    from unit.test_machine import a_feature_this_cpu_lacks

    lacking = a_feature_this_cpu_lacks()
    data = manifest_of(site)
    data["cpu_features"].append(lacking)
    write_manifest(site, data)
    assert_skipped(runtime_python, site, tmp_path, f"its kernels may use CPU features this CPU lacks: {lacking}")


def test_a_system_lacking_a_symbol_version_the_kernels_need_is_refused(runtime_python, site, tmp_path):
    data = manifest_of(site)
    data["libraries"]["libstdc++.so.6"]["GLIBCXX_99.0"] = "_ZdlPv"
    write_manifest(site, data)
    assert_skipped(runtime_python, site, tmp_path, "need system libraries this machine lacks: libstdc++.so.6 GLIBCXX_99.0")


def test_skipped_load_gives_cold_compile_outputs(runtime_python, site, cold_result, tmp_path):
    data = manifest_of(site)
    data["env"]["python"] = "3.0"
    write_manifest(site, data)
    cache = tmp_path / "cache"
    cache.mkdir()
    result = run_sample(runtime_python, cache, pythonpath=site)
    assert not result["precompiled"] and result["precompile_reason"].startswith("built for python='3.0'")
    assert result["loss"] == cold_result["loss"] and result["logits_sum"] == cold_result["logits_sum"]


# -- integrity -------------------------------------------------------------------------------


def a_kernel(site) -> str:
    return next(p for p in manifest_of(site)["files"] if p.endswith(".main.so"))


def test_altered_file_of_same_size_skips(runtime_python, site, tmp_path):
    victim = next(p for p in manifest_of(site)["files"] if "/fxgraph/" in p)
    path = blob(site, manifest_of(site), victim)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert_skipped(runtime_python, site, tmp_path, f"{victim} does not match its sha256")


# -- the cache dir ---------------------------------------------------------------------------


def test_read_only_site_packages_zip_import(runtime_python, site, tmp_path):
    """A zip on sys.path is read-only by nature (and chmod means nothing to root)."""
    for path in site.rglob("*"):
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(site.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(site).as_posix())
    cache = tmp_path / "cache"
    cache.mkdir()
    result = run_sample(runtime_python, cache, pythonpath=archive)
    assert result["precompiled"], result["precompile_reason"]
    assert result["kernels_compiled"] == 0 and result["aot_autograd"].get("autograd_cache_miss", 0) == 0


CONCURRENT = """
import json, os, sys, time
import torch
open(sys.argv[1] + f".{os.getpid()}.ready", "w").close()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.005)
import sample_pkg
trainer = sample_pkg.Trainer(sample_pkg.make_model())
loss = trainer.step(*sample_pkg.make_batch())
trainer.predict(sample_pkg.make_batch()[0])  # compiled: reads the caches the others install
print(json.dumps([sample_pkg.precompile_status.loaded, loss.item()]))
"""


def test_eight_processes_at_once_on_an_empty_cache_dir(runtime_python, site, cold_result, tmp_path):
    cache, go = tmp_path / "cache", tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRECOMPILE")}
    env.update(PYTHONPATH=str(site), TORCHINDUCTOR_CACHE_DIR=str(cache), XDG_CACHE_HOME=TEST_USER_CACHE)
    procs = [
        subprocess.Popen([runtime_python, "-c", CONCURRENT, go], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    deadline = time.monotonic() + 300
    while len(list(tmp_path.glob("go.*.ready"))) < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, outputs
    for out in outputs:
        loaded, loss = json.loads(out.strip().splitlines()[-1])
        assert loaded is True and math.isclose(loss, cold_result["loss"], rel_tol=1e-6)
    # Consistent: no temp files, and every kernel binary is one of the shipped ones, intact.
    assert not [p for p in files_in(cache) if p.name.endswith(".tmp")]
    shipped = {e["sha256"] for p, e in manifest_of(site)["files"].items() if p.endswith(".so")}
    kernels = [p for p in files_in(cache) if p.suffix == ".so"]
    assert len(kernels) == len(shipped)
    assert {hashlib.sha256(p.read_bytes()).hexdigest() for p in kernels} == shipped
