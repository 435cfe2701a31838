"""bake on wheels other backends built (setuptools, flit): installed with pip, warm; a failing workload."""

from __future__ import annotations

import json
import math
import stat
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import one_function_workload, read_manifest, run, run_one_function, run_sample
from unit.test_bake import bake, digest, fake_wheel, project, pyproject

SETUPTOOLS = pyproject("setuptools>=61", "setuptools.build_meta", '\n[tool.setuptools]\npackages = ["sample_pkg"]\n')


FLIT = pyproject("flit_core>=3.4", "flit_core.buildapi")


def members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()}


@pytest.fixture(scope="module")
def setuptools_wheel(tmp_path_factory) -> tuple[Path, Path]:
    src = project(tmp_path_factory.mktemp("setuptools") / "proj", SETUPTOOLS)
    proc = run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", src.parent / "dist", src])
    assert "setuptools" in proc.stdout or "sample_pkg-0.1.0-py3-none-any.whl" in proc.stdout
    (wheel,) = (src.parent / "dist").glob("*.whl")
    return src, wheel


def install(python: Path, wheel: Path, site: Path) -> Path:
    """pip installs the baked wheel into a dir of its own, put first on the path of ``python`` (the
    session's runtime venv: torch and hatch-precompile, at other paths than the baker's)."""
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--target", site, wheel])
    assert (site / "sample_pkg" / "_precompiled").is_dir()  # imported ahead of the venv's own sample_pkg
    return site


@pytest.mark.slow
def test_a_setuptools_wheel_baked_installs_with_pip_and_starts_warm(setuptools_wheel, runtime_python, cold_result, tmp_path):
    src, wheel = setuptools_wheel
    before = digest(wheel)
    proc = bake(wheel, "-o", tmp_path / "baked", "--project", src)
    assert f"[tool.hatch-precompile] of {src}" in proc.stdout
    (baked,) = (tmp_path / "baked").glob("*.whl")
    assert digest(wheel) == before  # the input is never written
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert baked.name.startswith(f"sample_pkg-0.1.0-{py}-{py}-") and "none-any" not in baked.name
    plain, new = members(wheel), members(baked)
    dist_info = "sample_pkg-0.1.0.dist-info"
    # Every file of the input byte for byte; the artifacts and the declaration added; RECORD whole.
    for name, data in plain.items():
        if name not in (f"{dist_info}/RECORD", f"{dist_info}/WHEEL"):
            assert new[name] == data, name
    added = set(new) - set(plain)
    assert added and all(n.startswith("sample_pkg/_precompiled/") for n in added - {
        f"{dist_info}/extra_metadata/hatch-precompile.json"})
    assert json.loads(new[f"{dist_info}/extra_metadata/hatch-precompile.json"])["workloads"] == [
        "sample_pkg.precompile:workload"]
    wheel_file = new[f"{dist_info}/WHEEL"].decode()
    assert "Root-Is-Purelib: false" in wheel_file and f"Tag: {baked.name.split('-', 2)[2][:-4]}" in wheel_file
    record = {line.rsplit(",", 2)[0] for line in new[f"{dist_info}/RECORD"].decode().splitlines()}
    assert record == set(new)
    assert read_manifest(baked)["kernels"]

    site = install(runtime_python, baked, tmp_path / "site")
    cache = tmp_path / "cache"
    cache.mkdir()
    warm = run_sample(runtime_python, cache, pythonpath=site)
    assert warm["precompiled"], warm["precompile_reason"]
    # built without steps (conftest): training runs its fallback, warm, besides inference
    assert warm["aot_autograd"]["autograd_cache_hit"] >= 2 and not warm["aot_autograd"].get("autograd_cache_miss")
    assert warm["kernels_compiled"] == 0
    assert math.isclose(warm["loss"], cold_result["loss"], rel_tol=1e-6)
    assert math.isclose(warm["logits_sum"], cold_result["logits_sum"], rel_tol=1e-6, abs_tol=1e-5)


# The package ships a script it runs (an executable member) and a file with a comma in its name.
TOOL = "sample_pkg/tool.sh"
COMMA = "sample_pkg/data,1.txt"
RUNS_ITS_TOOL = ("    import pathlib, subprocess\n"
                 "    subprocess.run([str(pathlib.Path(__file__).with_name('tool.sh'))], check=True)\n")


def mode(wheel: Path, member: str) -> int:
    with zipfile.ZipFile(wheel) as archive:
        return stat.S_IMODE(archive.getinfo(member).external_attr >> 16)


@pytest.mark.slow
def test_a_flit_wheel_baked_from_its_sdists_table_adds_a_set_when_baked_again(runtime_python, tmp_path):
    """Its workload compiles one function (conftest.one_function_workload) and runs the package's own
    script: what is under test is where bake finds the workload, what it adds, and that every member
    keeps its mode and name through bake, merge and pip; that a baked wheel of the whole sample
    starts warm is the setuptools test's."""
    src = project(tmp_path / "proj", FLIT)
    (src / "sample_pkg" / "precompile.py").write_text(one_function_workload() + RUNS_ITS_TOOL)
    (src / TOOL).write_text("#!/bin/sh\necho tool ran\n")
    (src / TOOL).chmod(0o755)
    (src / COMMA).write_text("one, two\n")
    run([sys.executable, "-m", "build", "--no-isolation", "-o", tmp_path / "dist", src])
    (wheel,), (sdist,) = (tmp_path / "dist").glob("*.whl"), (tmp_path / "dist").glob("*.tar.gz")
    proc = bake(wheel, "-o", tmp_path / "baked", "--project", sdist)
    assert f"of {sdist}!sample_pkg-0.1.0/pyproject.toml" in proc.stdout
    (baked,) = (tmp_path / "baked").glob("*.whl")
    # Baked again for another CPU capability, from the declaration the baked wheel now carries: two sets.
    proc = bake(baked, "-o", tmp_path / "twice", "--cpu-capabilities", "default", "--json")
    assert f"the declaration in {baked.name}" in proc.stdout  # progress: on stderr under --json
    (twice,) = (tmp_path / "twice").glob("*.whl")
    sets = {n.split("/")[3] for n in members(twice) if n.startswith("sample_pkg/_precompiled/sets/")}
    assert len(sets) == 2 and any(s.startswith("default-") for s in sets), sets
    document = json.loads(proc.stdout[proc.stdout.index('{\n "format"'):])
    assert document == {"format": 1, "wheels": [{"input": str(baked), "output": str(twice), "sets": sorted(sets),
                                                  "tag": twice.name.removesuffix(".whl").split("-", 2)[2],
                                                  "bytes": twice.stat().st_size}]}
    # The same machine twice is refused, naming why.
    again = bake(baked, "-o", tmp_path / "again", check=False)
    assert again.returncode == 2 and "already has sample_pkg/_precompiled/" in again.stdout
    assert not list((tmp_path / "again").glob("*.whl"))
    # Merged with the wheel it was baked from: the sets united, every member's mode and name kept.
    merged = run([sys.executable, "-m", "hatch_precompile", "merge", baked, twice, "-o", tmp_path / "merged"])
    assert "2 artifact set(s)" in merged.stdout
    (merged_wheel,) = (tmp_path / "merged").glob("*.whl")
    for each in (wheel, baked, twice, merged_wheel):
        assert (mode(each, TOOL), mode(each, COMMA)) == (0o755, 0o644), each
    from hatch_precompile.tools import wheelfile

    assert wheelfile.record_problem(wheelfile.read_wheel(merged_wheel), "sample_pkg-0.1.0.dist-info/RECORD") is None

    site = install(runtime_python, merged_wheel, tmp_path / "site")
    assert run([site / TOOL]).stdout == "tool ran\n"
    assert (site / COMMA).read_text() == "one, two\n"
    cache = tmp_path / "cache"
    cache.mkdir()
    warm = run_one_function(runtime_python, cache, pythonpath=site)
    assert warm["precompiled"] and warm["kernels_compiled"] == 0, warm
    assert warm["aot_autograd"]["autograd_cache_hit"] >= 1 and not warm["aot_autograd"].get("autograd_cache_miss")


@pytest.mark.slow
def test_a_failing_workload_fails_the_bake_with_its_traceback(tmp_path):
    wheel = fake_wheel(tmp_path / "in")
    before = digest(wheel)
    proc = bake(wheel, "-o", tmp_path / "out", "--workload", "tiny.work:workload", check=False)
    assert proc.returncode == 2
    assert "tiny.work:workload" in proc.stdout and "RuntimeError: the workload broke" in proc.stdout
    assert digest(wheel) == before and not list((tmp_path / "out").glob("*.whl"))
