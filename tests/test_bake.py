"""`hatch-precompile bake`: wheels that setuptools and flit built, precompiled after the build,
installed with pip, warm in a fresh process; and every way it refuses, leaving the input alone."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import SAMPLE, TORCH_REQUIREMENT, make_venv, read_manifest, run, run_sample

def pyproject(requires: str, backend: str, more: str = "") -> str:
    """The sample's metadata, built by ``backend``, declaring its workload for bake."""
    return (f'[build-system]\nrequires = ["{requires}"]\nbuild-backend = "{backend}"\n\n'
            '[project]\nname = "sample_pkg"\nversion = "0.1.0"\ndescription = "the sample"\n'
            'dependencies = ["torch>=2.7", "hatch-precompile"]\n' + more
            + '\n[tool.hatch-precompile]\nworkload = "sample_pkg.precompile:workload"\n')


SETUPTOOLS = pyproject("setuptools>=61", "setuptools.build_meta", '\n[tool.setuptools]\npackages = ["sample_pkg"]\n')
FLIT = pyproject("flit_core>=3.4", "flit_core.buildapi")


def project(dest: Path, pyproject: str) -> Path:
    shutil.copytree(SAMPLE / "sample_pkg", dest / "sample_pkg", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "pyproject.toml").write_text(pyproject)
    return dest


def bake(*args, check=True):
    return run([sys.executable, "-m", "hatch_precompile", "bake", *[str(a) for a in args]], check=check)


def members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def setuptools_wheel(tmp_path_factory) -> tuple[Path, Path]:
    src = project(tmp_path_factory.mktemp("setuptools") / "proj", SETUPTOOLS)
    proc = run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", src.parent / "dist", src])
    assert "setuptools" in proc.stdout or "sample_pkg-0.1.0-py3-none-any.whl" in proc.stdout
    (wheel,) = (src.parent / "dist").glob("*.whl")
    return src, wheel


@pytest.fixture(scope="module")
def bake_venv(tmp_path_factory, hp_dist) -> Path:
    python = make_venv(tmp_path_factory.mktemp("bake-venv") / "venv")
    run([python, "-m", "pip", "install", "-q", TORCH_REQUIREMENT, next(hp_dist.glob("*.whl"))])
    return python


@pytest.mark.slow
def test_a_setuptools_wheel_baked_installs_with_pip_and_starts_warm(setuptools_wheel, bake_venv, cold_result, tmp_path):
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

    run([bake_venv, "-m", "pip", "install", "-q", "--no-deps", baked])
    cache = tmp_path / "cache"
    cache.mkdir()
    warm = run_sample(bake_venv, cache)
    assert warm["precompiled"], warm["precompile_reason"]
    assert warm["aot_autograd"]["autograd_cache_hit"] >= 2 and not warm["aot_autograd"].get("autograd_cache_miss")
    assert warm["kernels_compiled"] == 0
    assert math.isclose(warm["loss"], cold_result["loss"], rel_tol=1e-6)
    assert math.isclose(warm["logits_sum"], cold_result["logits_sum"], rel_tol=1e-6, abs_tol=1e-5)


@pytest.mark.slow
def test_a_flit_wheel_baked_from_its_sdists_table_adds_a_set_when_baked_again(bake_venv, cold_result, tmp_path):
    src = project(tmp_path / "proj", FLIT)
    run([sys.executable, "-m", "build", "--no-isolation", "-o", tmp_path / "dist", src])
    (wheel,), (sdist,) = (tmp_path / "dist").glob("*.whl"), (tmp_path / "dist").glob("*.tar.gz")
    proc = bake(wheel, "-o", tmp_path / "baked", "--project", sdist)
    assert f"of {sdist}!sample_pkg-0.1.0/pyproject.toml" in proc.stdout
    (baked,) = (tmp_path / "baked").glob("*.whl")
    # Baked again for another CPU capability, from the declaration the baked wheel now carries: two sets.
    proc = bake(baked, "-o", tmp_path / "twice", "--cpu-capabilities", "default")
    assert f"the declaration in {baked.name}" in proc.stdout
    (twice,) = (tmp_path / "twice").glob("*.whl")
    sets = {n.split("/")[3] for n in members(twice) if n.startswith("sample_pkg/_precompiled/sets/")}
    assert len(sets) == 2 and any(s.startswith("default-") for s in sets), sets
    # The same machine twice is refused, naming why.
    again = bake(baked, "-o", tmp_path / "again", check=False)
    assert again.returncode == 2 and "already has sample_pkg/_precompiled/" in again.stdout
    assert not list((tmp_path / "again").glob("*.whl"))

    run([bake_venv, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", twice])
    cache = tmp_path / "cache"
    cache.mkdir()
    warm = run_sample(bake_venv, cache)
    assert warm["precompiled"] and warm["kernels_compiled"] == 0, warm
    assert warm["aot_autograd"]["autograd_cache_hit"] >= 2 and not warm["aot_autograd"].get("autograd_cache_miss")
    assert math.isclose(warm["loss"], cold_result["loss"], rel_tol=1e-6)


def fake_wheel(dest: Path, requires: str = "torch>=2.7", files: dict[str, str] | None = None) -> Path:
    """A small plain wheel, as any backend writes one."""
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / "tiny-1.0-py3-none-any.whl"
    contents = {
        "tiny/__init__.py": "",
        "tiny/work.py": "def workload():\n    raise RuntimeError('the workload broke')\n",
        **(files or {}),
        "tiny-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\nRequires-Dist: {requires}\n",
        "tiny-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in contents.items():
            archive.writestr(name, text)
        archive.writestr("tiny-1.0.dist-info/RECORD", "".join(f"{n},,\n" for n in contents) + "tiny-1.0.dist-info/RECORD,,\n")
    return wheel


@pytest.mark.parametrize("args, message", [
    ([], "tiny-1.0-py3-none-any.whl declares no workload: give --workload MODULE:FUNCTION, or --project"),
    (["--workload", "tiny.work:workload", "--package", "other"], "has no package 'other' (from --workload)"),
    (["--workload", "nope"], "--workload 'nope' must look like 'package.module:function'"),
])
def test_bake_refuses_without_a_usable_declaration_and_leaves_the_input_alone(tmp_path, args, message):
    wheel = fake_wheel(tmp_path / "in")
    before = digest(wheel)
    proc = bake(wheel, "-o", tmp_path / "out", *args, check=False)
    assert proc.returncode == 2 and message in proc.stdout, proc.stdout
    assert digest(wheel) == before and not list((tmp_path / "out").glob("*.whl"))


def test_a_bad_table_is_named_with_its_option_and_file(tmp_path):
    wheel = fake_wheel(tmp_path / "in")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text('[tool.hatch-precompile]\nworkload = "tiny.work:workload"\n'
                                                      "timeout = -1\n")
    proc = bake(wheel, "-o", tmp_path / "out", "--project", tmp_path / "proj", check=False)
    assert proc.returncode == 2
    assert f"Option `timeout` in [tool.hatch-precompile] of {tmp_path / 'proj'} must be" in proc.stdout


def test_a_torch_the_wheel_does_not_accept_is_refused_before_anything_runs(tmp_path):
    wheel = fake_wheel(tmp_path / "in", requires="torch==2.7.0")
    proc = bake(wheel, "-o", tmp_path / "out", "--workload", "tiny.work:workload", check=False)
    assert proc.returncode == 2
    assert "tiny-1.0-py3-none-any.whl requires torch==2.7.0, and " in proc.stdout and "(--python)" in proc.stdout


@pytest.mark.slow
def test_a_failing_workload_fails_the_bake_with_its_traceback(tmp_path):
    wheel = fake_wheel(tmp_path / "in")
    before = digest(wheel)
    proc = bake(wheel, "-o", tmp_path / "out", "--workload", "tiny.work:workload", check=False)
    assert proc.returncode == 2
    assert "tiny.work:workload" in proc.stdout and "RuntimeError: the workload broke" in proc.stdout
    assert digest(wheel) == before and not list((tmp_path / "out").glob("*.whl"))


@pytest.mark.parametrize("platforms, least", [
    (["manylinux2014_x86_64", "manylinux_2_24_x86_64"], "manylinux_2_24_x86_64"),
    (["manylinux_2_28_x86_64", "manylinux_2_24_x86_64"], "manylinux_2_28_x86_64"),
    (["linux_x86_64", "manylinux_2_24_x86_64"], "linux_x86_64"),
])
def test_the_baked_tag_is_the_least_compatible_of_the_inputs_and_the_kernels(platforms, least):
    from hatch_precompile.tools.bake import _least_compatible

    assert _least_compatible(platforms) == least
