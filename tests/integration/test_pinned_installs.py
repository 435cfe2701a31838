"""Torch pinned beside the package, as users and Dockerfiles install: one command, a requirements
file, a constraints file, PIP_CONSTRAINT, uv. Each build environment gets the pinned torch and no
other; the workload runs on it. Fresh venvs, real frontends.

The Dockerfile's flow and uv's end warm in a fresh process. pip makes the build environment the same
way whichever way torch was pinned, so the other two pip flows need no second full compile. Their
workload records the torch it ran on and stops, and on-failure = "warn" lets the install finish."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TORCH_REQUIREMENT, copy_project, make_venv, run, set_manifest

from integration.test_build_errors import WORKLOAD_TABLE, rewrite
from integration.test_install_flow import assert_warm, build_env_section, find_links, stop_after_saying_where, torch_of

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

TORCH_VERSION = TORCH_REQUIREMENT.split("==")[1]
# Byte-compiling torch at install costs 20 s a venv on a 2-core Xeon; these flows import it in a
# few processes (the workload, a warm check), which compile only the modules they import.
NO_BYTECODE = {"PIP_COMPILE": "0"}  # pip reads PIP_NO_COMPILE=1 the other way round


def assert_built_for_the_pin(output: str, how: str) -> None:
    """The build line names the pin and its source; the build env got that torch and no other."""
    line = next(line for line in output.splitlines() if "precompile: building artifacts for" in line)
    assert f"{how}" in line, line
    section = build_env_section(output)
    installed = " ".join(re.findall(r"Successfully installed (.*)", section)).split()
    torches = [name.split("-", 1)[1] for name in installed if name.startswith("torch-")]
    assert len(torches) == 1 and torches[0].startswith(TORCH_VERSION), installed
    # Not even another torch's wheel fetched for its metadata.
    fetched = re.findall(r"(?:Processing|Downloading|Using cached) \S*?torch-(\d\S*?)-", section)
    assert all(version.startswith(TORCH_VERSION) for version in fetched), fetched
    assert not any(name.startswith("nvidia") for name in installed), "a CUDA torch went into the build env"


def assert_ran_on_the_pin(marker: Path) -> None:
    """The workload ran on the pinned torch pip put into the build environment, where the hook's
    dependencies() go (``pip-build-env-*/normal``; build-system.requires go to ``overlay``), not
    on another torch of that version (this suite's own, say). The target venv has no torch while
    pip builds, so "not the target's" would prove nothing."""
    _, version, torch_file = json.loads(marker.read_text())
    assert version.startswith(TORCH_VERSION), version
    assert re.search(r"/pip-build-env-[^/]+/normal/", torch_file), torch_file


def test_pip_install_with_torch_pinned_in_the_same_command(links, tmp_path):
    python = make_venv(tmp_path / "venv")
    project, marker = copy_project(tmp_path / "sample_pkg"), tmp_path / "ran-on.json"
    stop_after_saying_where(project, marker)
    proc = run([python, "-m", "pip", "install", "-v", TORCH_REQUIREMENT, project], env={**find_links(links), **NO_BYTECODE})
    assert_built_for_the_pin(proc.stdout, f"pip was told to install {TORCH_REQUIREMENT} (pip's command line)")
    assert_ran_on_the_pin(marker)
    assert torch_of(python).startswith(TORCH_VERSION)


def test_dockerfile_requirements_then_a_fresh_container_process(links, tmp_path):
    """RUN python -m venv /venv; RUN pip install -r requirements.txt; then `docker run`: a new
    process with an empty HOME and an empty cache dir (no Docker engine here: the same steps).
    The kernels are built in pip's build env, at a path that is gone when they run: they hit. The
    project says `recompiles = "error"`: training then inference of one model compiles two graphs
    by design, not an instability, so the build passes."""
    project = rewrite(copy_project(tmp_path / "app" / "sample_pkg"), WORKLOAD_TABLE + 'recompiles = "error"\n')
    (tmp_path / "app" / "constraints.txt").write_text("torch<2.14\n")
    (tmp_path / "app" / "requirements.txt").write_text(f"-c constraints.txt\n{TORCH_REQUIREMENT}\n./sample_pkg\n")
    python = make_venv(tmp_path / "venv")
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = run([python, "-m", "pip", "install", "-v", "-r", "requirements.txt"], env={**find_links(links),
               "TMPDIR": str(temp), **NO_BYTECODE}, cwd=tmp_path / "app")
    assert_built_for_the_pin(proc.stdout, "pip was told to install ")
    assert project.is_dir()
    # The workload ran on pip's build env's torch, at a path gone now: its prefix header went with it.
    assert not list(temp.rglob("precompiled_headers")), sorted(temp.rglob("*"))[:20]
    # the build's report of the workload, from pip's log: the steps' fallbacks and inference
    assert re.search(r"3 graph\(s\), 0 graph break\(s\), 0 recompile\(s\)", proc.stdout), proc.stdout[-3000:]
    assert re.search(r"filename=sample_pkg-0\.1\.0-cp\d+-cp\d+-(manylinux_\d+_\d+|linux)_x86_64\.whl", proc.stdout)
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    manifest = json.loads(set_manifest(site).read_text())
    assert manifest["kernels"] and "pip-build-env" not in json.dumps(manifest["kernels"])
    assert manifest["env"]["torch"].startswith(TORCH_VERSION)
    home, cache = tmp_path / "container-home", tmp_path / "container-cache"
    home.mkdir()
    cache.mkdir()
    container = {"PATH": os.environ["PATH"], "HOME": str(home), "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    proc = subprocess.run([python, "-m", "sample_pkg", "--json"], env=container, capture_output=True, text=True,
                          cwd=home, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["precompiled"], result["precompile_reason"]
    assert result["aot_autograd"].get("autograd_cache_miss", 0) == 0 and result["kernels_compiled"] == 0, (
        result, proc.stderr[-3000:])
    assert result["torch"].startswith(TORCH_VERSION)


def test_pip_constraint_with_the_newest_pip(links, tmp_path):
    """The newest pip applies PIP_CONSTRAINT to the target only, not to the build env: the hook does."""
    python = make_venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "-q", "-U", "pip"])
    (tmp_path / "constraints.txt").write_text(f"{TORCH_REQUIREMENT}\n")
    project, marker = copy_project(tmp_path / "sample_pkg"), tmp_path / "ran-on.json"
    stop_after_saying_where(project, marker)
    env = {"PIP_CONSTRAINT": str(tmp_path / "constraints.txt"), **find_links(links), **NO_BYTECODE}
    proc = run([python, "-m", "pip", "install", "-v", project], env=env)
    assert_built_for_the_pin(proc.stdout, "pip was told to install ")
    assert_ran_on_the_pin(marker)
    assert torch_of(python).startswith(TORCH_VERSION)


@pytest.fixture(scope="module")
def torch_wheels(tmp_path_factory) -> Path:
    """torch and its dependencies as pip finds them on this machine, for uv (which reads no pip config)."""
    out = tmp_path_factory.mktemp("torch-wheels")
    run([sys.executable, "-m", "pip", "download", "-q", "-d", out, TORCH_REQUIREMENT])
    return out


def test_uv_pip_install_with_a_requirements_file(links, torch_wheels, tmp_path):
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    python = make_venv(tmp_path / "venv")
    copy_project(tmp_path / "sample_pkg")
    (tmp_path / "requirements.txt").write_text(f"{TORCH_REQUIREMENT}\n./sample_pkg\n")
    proc = run([uv, "pip", "install", "-v", "--python", python, "--no-index", "--find-links", links,
                "--find-links", torch_wheels, "-r", "requirements.txt"],
               env={"UV_CACHE_DIR": str(tmp_path / "uv-cache")}, cwd=tmp_path)
    line = next(line for line in proc.stdout.splitlines() if "precompile: building artifacts for" in line)
    assert f"uv was told to install {TORCH_REQUIREMENT} ({tmp_path / 'requirements.txt'})" in line, line
    assert torch_of(python).startswith(TORCH_VERSION)
    assert_warm(python, tmp_path)
