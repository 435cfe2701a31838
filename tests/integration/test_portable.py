"""Warm and safe on the user's machine, not a copy of the builder's: any thread count, any compiler of
the build's family, exactly the CPU features and system libraries the kernels need, a wheel tag
PyPI takes, and a plain wheel where the machine cannot compile. Real wheels, fresh processes."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import build_wheel, copy_project, inference_warm, read_manifest, run, run_sample

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

# A fresh process's first compiled step of the sample, after a thread setting: torch.set_num_threads
# (an 8-core or 128-core machine), or OMP_NUM_THREADS (capped at this machine's cores by torch).
STEP_AT = (
    "import json, sys, runpy, torch; torch.set_num_threads({threads}); sys.argv = ['x', '--json']; "
    "runpy.run_module('sample_pkg', run_name='__main__')"
)


def so_count(cache: Path) -> int:
    return sum(1 for _ in cache.rglob("*.so"))


def first_step(python: Path, cache: Path, threads: int | None = None, env: dict | None = None, site=None) -> dict:
    cache.mkdir(parents=True, exist_ok=True)
    extra = {"TORCHINDUCTOR_CACHE_DIR": str(cache), **(env or {})}
    if site is not None:
        extra["PYTHONPATH"] = str(site)
    if threads is None:
        return run_sample(python, cache, env=env, pythonpath=site)
    proc = run([python, "-c", STEP_AT.format(threads=threads)], env=extra, cwd=cache.parent)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def eager_result(runtime_python, tmp_path_factory) -> dict:
    """The sample's numbers without compiling (what every compiled run must agree with)."""
    return run_sample(runtime_python, tmp_path_factory.mktemp("eager") / "cache",
                      env={"TORCH_COMPILE_DISABLE": "1", "PRECOMPILE": "0"})


def assert_warm(result: dict, eager: dict) -> None:
    assert result["precompiled"], result["precompile_reason"]
    assert inference_warm(result), result["aot_autograd"]
    assert result["aot_autograd"].get("autograd_cache_miss", 0) == 0, result["aot_autograd"]
    assert result["kernels_compiled"] == 0, "a .so was built: a kernel or an ISA probe compiled"
    assert math.isclose(result["loss"], eager["loss"], rel_tol=1e-5)
    assert math.isclose(result["logits_sum"], eager["logits_sum"], rel_tol=1e-4, abs_tol=1e-4)


# -- any thread count ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("threads", "env"),
    [(1, None), (8, None), (32, None), (128, None), (None, {"OMP_NUM_THREADS": "1"})],
    ids=["set_num_threads(1)", "set_num_threads(8)", "set_num_threads(32)", "set_num_threads(128)", "OMP_NUM_THREADS=1"],
)
def test_warm_at_any_thread_count(runtime_python, eager_result, tmp_path, threads, env):
    assert_warm(first_step(runtime_python, tmp_path / "cache", threads, env), eager_result)


def test_shipped_kernels_take_the_thread_count_of_the_process_they_run_in(precompiled_wheel):
    """From the code they run: no kernel has a thread count compiled in; each parallel region takes
    OpenMP's (torch.set_num_threads / OMP_NUM_THREADS)."""
    wheel = precompiled_wheel[0]
    manifest = read_manifest(wheel)
    assert manifest["settings"] == {"cpp.dynamic_threads": True}
    with zipfile.ZipFile(wheel) as archive:
        blob = lambda path: archive.read(f"sample_pkg/_precompiled/blobs/{manifest['files'][path]['sha256']}")  # noqa: E731
        sources = {p: blob(p).decode() for p in manifest["files"] if p.endswith(".cpp")}
    parallel = {p: s for p, s in sources.items() if "#pragma omp parallel" in s}
    assert parallel, "the sample's kernels run in parallel regions"
    for path, source in sources.items():
        assert "num_threads(" not in source, path
    # Whether some reduction sizes per-thread buffers (omp_get_max_threads) depends on the build
    # CPU's vector ISA: the sample's AVX-512 kernels do, its AVX2 kernels have no such buffers.


# -- any compiler of the build's family ------------------------------------------------------------


def wrapper(path: Path, version: str | None = None) -> Path:
    """A compiler at another path and name: this machine's g++ underneath, its own --version."""
    answer = f'if [ "$1" = "--version" ]; then echo "{version}"; exit 0; fi\n' if version else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\n{answer}exec {shutil.which("g++")} "$@"\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("case", ["another path and name", "another version", "another distribution's g++", "g++-11"])
def test_a_compiler_of_the_builds_family_stands_in(runtime_python, eager_result, tmp_path, case):
    if case == "another path and name":
        env = {"CXX": str(wrapper(tmp_path / "bin" / "g++-standin"))}
    elif case == "another version":
        env = {"CXX": str(wrapper(tmp_path / "bin" / "x86_64-linux-gnu-g++-13", "g++ (GCC) 13.3.0"))}
    elif case == "another distribution's g++":  # the same name, first on PATH, another version
        wrapper(tmp_path / "bin" / "g++", "g++ (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0")
        env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    else:
        if shutil.which("g++-11") is None or run(["g++-11", "--version"], check=False).returncode != 0:
            pytest.skip("g++-11 is not installed (apt install g++-11)")
        env = {"CXX": "g++-11"}
    assert_warm(first_step(runtime_python, tmp_path / "cache", env=env), eager_result)


def test_a_compiler_of_another_family_is_said_not_to_stand_in(runtime_python, tmp_path):
    clang = wrapper(tmp_path / "bin" / "clang++")  # by its name, Inductor treats it as clang
    code = "import json, sample_pkg; s = sample_pkg.precompile_status; print(json.dumps([s.loaded, list(s.notes)]))"
    proc = run([runtime_python, "-W", "always", "-c", code],
               env={"CXX": str(clang), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    loaded, notes = json.loads(proc.stdout.splitlines()[-1])
    assert loaded and notes == [f"the C++ compiler here ({clang}) is not of the build's family (gcc, g++): the graphs "
                                "compile again"]
    assert proc.stdout.count("precompiled caches are installed, but the C++ compiler here") == 1


# -- the wheel tag ---------------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="manylinux is Linux's")
def test_wheel_takes_the_manylinux_tag_the_kernels_allow(precompiled_wheel):
    wheel, output = precompiled_wheel
    manifest = read_manifest(wheel)
    tag = manifest["platform"]["tag"]
    assert tag and re.fullmatch(r"manylinux_2_\d+_\w+", tag), manifest["platform"]
    assert wheel.name.endswith(f"-{tag}.whl") and f"precompile: platform tag {tag}, as auditwheel's policy" in output
    # Every C library version the kernels need is at most the tag's glibc; what torch ships is not asked of the system.
    glibc = max((tuple(map(int, v.split("_")[1].split("."))) for v in manifest["libraries"].get("libc.so.6", {})
                 if re.fullmatch(r"GLIBC_[\d.]+", v)), default=(2, 5))
    assert glibc <= tuple(map(int, tag.split("_")[1:3]))
    assert "libtorch_cpu.so" in manifest["libraries"] and "libgomp.so.1" in manifest["libraries"]


# -- a machine that cannot compile -----------------------------------------------------------------


def test_no_compiler_gives_a_plain_wheel_and_one_line(tmp_path):
    proc, wheel = build_wheel(copy_project(tmp_path / "sample_pkg"), tmp_path / "dist", env={"CXX": str(tmp_path / "no-g++")})
    assert wheel.name == "sample_pkg-0.1.0-py3-none-any.whl"
    lines = [line for line in proc.stdout.splitlines() if "cannot build C++ kernels" in line]
    assert lines == [
        "precompile: this machine cannot build C++ kernels: No working C++ compiler found in "
        f"torch._inductor.config.cpp.cxx: (None, '{tmp_path / 'no-g++'}'); building the wheel without precompiled artifacts"
    ], proc.stdout[-3000:]
    assert "running workload" not in proc.stdout, "found out before any workload ran"
