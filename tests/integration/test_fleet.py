"""One wheel for a fleet: an artifact set per CPU capability, and wheels of several machines merged.

The projects compile one function (conftest.one_function_workload): what is under test is which
sets are made, stored, merged and picked, the same for any workload; the sample's whole workload
warm from a wheel is test_install_flow's and test_bake's. Five builds (three sets in one) cost a
third of the sample's each."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import build_wheel, copy_project, one_function_workload, run, run_one_function, unpack

from integration.test_build_errors import WORKLOAD_TABLE, project_with

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

MACHINE = run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"]).stdout.split()[-1]
if MACHINE not in ("AVX2", "AVX512"):
    pytest.skip(f"these tests need an x86 machine with AVX2 (this one: {MACHINE})", allow_module_level=True)


def with_capabilities(tmp_path: Path, capabilities: list[str]) -> Path:
    table = WORKLOAD_TABLE + f"cpu-capabilities = {json.dumps(capabilities)}\n"
    return project_with(tmp_path, table, one_function_workload())


def sets_in(wheel: Path) -> dict[str, dict]:
    with zipfile.ZipFile(wheel) as archive:
        return {
            n.split("/")[3]: json.loads(archive.read(n))
            for n in archive.namelist() if re.fullmatch(r"sample_pkg/_precompiled/sets/[^/]+/manifest\.json", n)
        }


def stored_bytes(wheel: Path) -> int:
    with zipfile.ZipFile(wheel) as archive:
        return sum(i.file_size for i in archive.infolist() if i.filename.startswith("sample_pkg/_precompiled/blobs/"))


@pytest.fixture(scope="module")
def fleet_wheel(tmp_path_factory):
    """One build, three capabilities asked for: default and avx2 run here, avx512 where the CPU has it."""
    tmp = tmp_path_factory.mktemp("fleet")
    proc, wheel = build_wheel(with_capabilities(tmp, ["default", "avx2", "avx512"]), tmp / "dist")
    return wheel, proc.stdout


@pytest.fixture(scope="module")
def single_wheels(tmp_path_factory):
    """The same project built once per capability, as two machines of a fleet would."""
    wheels = []
    for capability in ("default", "avx2"):
        tmp = tmp_path_factory.mktemp(f"single-{capability}")
        wheels.append(build_wheel(with_capabilities(tmp, [capability]), tmp / "dist")[1])
    return wheels


def test_one_build_makes_a_set_per_capability_the_machine_can_run(fleet_wheel):
    wheel, output = fleet_wheel
    for capability in ("default", "avx2"):
        assert f"precompile: artifact set for CPU capability {capability} (ATEN_CPU_CAPABILITY={capability})" in output
    sets = sets_in(wheel)
    capabilities = sorted(m["env"]["cpu_capability"] for m in sets.values())
    if MACHINE == "AVX512":
        assert capabilities == ["AVX2", "AVX512", "DEFAULT"]
    else:
        assert capabilities == ["AVX2", "DEFAULT"]
        assert ("precompile: warning: this machine cannot run avx512 code (its CPU has avx2); "
                "no artifact set for avx512") in output
    assert all(name.startswith(m["env"]["cpu_capability"].lower() + "-") for name, m in sets.items())
    # Content-addressed: each distinct file once, however many sets list it; so N sets cost less
    # than N times the largest (sets of different vector ISAs share few files: docs/guide/fleets.md).
    unique = {e["sha256"]: e["size"] for m in sets.values() for e in m["files"].values()}
    assert stored_bytes(wheel) == sum(unique.values())
    one_set = max(sum(e["size"] for e in m["files"].values()) for m in sets.values())
    assert stored_bytes(wheel) < len(sets) * one_set
    assert re.search(rf"precompile: {len(sets)} artifact sets in [\d.]+ MB \([\d.]+ MB if each stored", output)


@pytest.mark.parametrize("capability", ["default", None], ids=["ATEN_CPU_CAPABILITY=default", "the machine's"])
def test_each_process_gets_the_set_of_its_capability(fleet_wheel, runtime_python, tmp_path, capability):
    site = unpack(fleet_wheel[0], tmp_path / "site")
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {"ATEN_CPU_CAPABILITY": capability} if capability else {}
    result = run_one_function(runtime_python, cache, pythonpath=site, env=env)
    assert result["precompiled"], result["precompile_reason"]
    assert result["aot_autograd"]["autograd_cache_hit"] >= 1 and not result["aot_autograd"].get("autograd_cache_miss")
    assert result["kernels_compiled"] == 0


def test_a_process_no_set_fits_is_told_every_set(fleet_wheel, runtime_python, tmp_path):
    site = unpack(fleet_wheel[0], tmp_path / "site")
    for manifest in (site / "sample_pkg" / "_precompiled" / "sets").glob("*/manifest.json"):
        data = json.loads(manifest.read_text())
        if data["env"]["cpu_capability"] == MACHINE:  # the set that would fit: made for another ABI
            data["env"]["python_abi"] = "cpython-311t-x86_64-linux-gnu"
            manifest.write_text(json.dumps(data))
    code = "import json, sample_pkg; s = sample_pkg.precompile_status; print(json.dumps([s.loaded, s.reason]))"
    env = {"PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c")}
    loaded, reason = json.loads(run([runtime_python, "-c", code], env=env).stdout.splitlines()[-1])
    sets = sets_in(fleet_wheel[0])
    assert not loaded and reason.startswith(f"none of the {len(sets)} artifact sets fits this environment: ")
    for name in sets:  # each named with its first differing field
        assert f"{name}: built for " in reason
    assert "built for python_abi='cpython-311t-x86_64-linux-gnu'" in reason
    assert "built for cpu_capability='DEFAULT'" in reason
    assert reason.endswith("or run `hatch-precompile warm sample_pkg`")


def test_merged_wheels_of_two_machines_behave_like_the_build_with_both(single_wheels, fleet_wheel, runtime_python, tmp_path):
    proc = run([sys.executable, "-m", "hatch_precompile", "merge", "-o", tmp_path / "merged", *single_wheels])
    (merged,) = (tmp_path / "merged").glob("*.whl")
    # The least compatible of the inputs' platform tags (one set's kernels may need a newer glibc),
    # the tag the build that made both sets gives its wheel.
    assert merged.name == fleet_wheel[0].name
    sets = sets_in(merged)
    assert sorted(m["env"]["cpu_capability"] for m in sets.values()) == ["AVX2", "DEFAULT"]
    assert f"merge: {merged}: 2 artifact set(s): " in proc.stdout
    assert set(sets) <= set(sets_in(fleet_wheel[0])), "the same set names as the build that made both"
    scripted = run([sys.executable, "-m", "hatch_precompile", "merge", "--json", "-o", tmp_path / "again", *single_wheels])
    assert json.loads(scripted.stdout) == {"format": 1, "inputs": [str(w) for w in single_wheels],
                                           "output": str(tmp_path / "again" / merged.name),
                                           "bytes": merged.stat().st_size, "sets": sorted(sets)}
    # RECORD lists every member with its hash and size, and pip installs it.
    with zipfile.ZipFile(merged) as archive:
        record = archive.read("sample_pkg-0.1.0.dist-info/RECORD").decode()
        tag = merged.name.removesuffix(".whl").split("-", 2)[2]
        assert f"Tag: {tag}\n" in archive.read("sample_pkg-0.1.0.dist-info/WHEEL").decode()
        rows = {row[0]: row[1:] for row in csv.reader(io.StringIO(record))}
        assert set(rows) == set(archive.namelist())
        for name in archive.namelist():
            if name.endswith("RECORD"):
                continue
            data = archive.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert rows[name] == [f"sha256={digest}", str(len(data))], name
    site = tmp_path / "site"
    run([runtime_python, "-m", "pip", "install", "-q", "--no-deps", "--target", site, merged])
    for capability in ("default", "avx2"):
        cache = tmp_path / f"cache-{capability}"
        cache.mkdir()
        result = run_one_function(runtime_python, cache, pythonpath=site, env={"ATEN_CPU_CAPABILITY": capability})
        assert result["precompiled"] and result["kernels_compiled"] == 0, (capability, result)
        assert result["aot_autograd"].get("autograd_cache_hit") and not result["aot_autograd"].get("autograd_cache_miss"), capability
    shown = run([runtime_python, "-m", "hatch_precompile", "report", merged]).stdout
    assert shown.count("sample_pkg: precompiled artifacts shipped, ") == 2
    assert re.search(r"_precompiled: 2 artifact sets in [\d.]+ MB", shown)


def test_merge_refuses_wheels_whose_code_differs(notorch_python, tmp_path):
    wheels = []
    for name, change in (("a", None), ("b", "# another line\n")):
        project = copy_project(tmp_path / name / "sample_pkg")
        if change:
            model = project / "sample_pkg" / "model.py"
            model.write_text(model.read_text() + change)
        wheels.append(build_wheel(project, tmp_path / name / "dist", python=notorch_python, env={"PRECOMPILE": "0"})[1])
    proc = run([notorch_python, "-m", "hatch_precompile", "merge", "-o", tmp_path / "out", *wheels], check=False)
    assert proc.returncode == 2
    assert (f"hatch-precompile merge: sample_pkg/model.py differs between {wheels[0]} and {wheels[1]}: "
            "the wheels differ outside their artifact sets") in proc.stdout
    assert not (tmp_path / "out").exists()
