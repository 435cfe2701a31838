"""The torch-first flow, with real frontends: torch is installed first, then the package, isolated.

Each build must run the workload on the target environment's torch (so the artifacts hit there)
without installing a torch into the build environment, and leave the target untouched.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Callable

import pytest
from conftest import (
    TORCH_REQUIREMENT,
    copy_project,
    make_venv,
    one_function_workload,
    run,
    run_one_function,
    run_sample,
    unpack,
)

from integration.test_build_errors import WORKLOAD_TABLE, project_with, rewrite

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    """A user's venv: torch installed first (and `build`, to run `python -m build` from it)."""
    python = make_venv(tmp_path_factory.mktemp("target") / "venv")
    run([python, "-m", "pip", "install", "-q", TORCH_REQUIREMENT, "build"])
    return python


def prefix_of(python: Path) -> str:
    return run([python, "-c", "import sys; print(sys.prefix)"]).stdout.strip()


def torch_of(python: Path) -> str:
    return run([python, "-c", "import importlib.metadata as m; print(m.version('torch'))"]).stdout.strip()


def snapshot(directory: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in directory.rglob("*") if not p.is_symlink()}


def find_links(*dirs: Path) -> dict[str, str]:
    """pip's find-links: the machine's own (where torch wheels may lie) plus ``dirs``."""
    return {"PIP_FIND_LINKS": " ".join([os.environ.get("PIP_FIND_LINKS", ""), *map(str, dirs)]).strip()}


def build_env_section(pip_log: str) -> str:
    """What pip installed into the isolated build env, from `pip -v`'s log."""
    return "\n".join(re.findall(r"Installing (?:build|backend) dependencies: started\n(.*?)"
                                 r"Installing (?:build|backend) dependencies: finished", pip_log, re.S))


def assert_targets(output: str, python: Path, via: str) -> None:
    assert (
        f"precompile: building artifacts for torch {torch_of(python)} of the target environment "
        f"{prefix_of(python)} ({via}); the workload runs there"
    ) in output, output[-4000:]


def assert_warm(python: Path, tmp_path: Path, pythonpath: Path | None = None, one_function: bool = False) -> None:
    """A fresh process of ``python`` starts warm: the sample's training step and inference, or
    (``one_function``) the function of conftest.one_function_workload()."""
    cache = tmp_path / "cache"
    cache.mkdir()
    result = (run_one_function if one_function else run_sample)(python, cache, pythonpath=pythonpath)
    assert result["precompiled"], result["precompile_reason"]
    # the sample: inference, and training where its exported step is not shipped (steps off)
    assert result["aot_autograd"]["autograd_cache_hit"] >= 1
    assert result["aot_autograd"].get("autograd_cache_miss", 0) == 0
    assert result["kernels_compiled"] == 0


def says_where_it_ran(marker: Path) -> str:
    """A workload that writes the interpreter prefix and the torch it ran with to ``marker``, then stops:
    a build with it proves where the hook ran the workload without compiling anything."""
    return ("import json, pathlib, sys\n\nimport torch\n\n\ndef workload():\n"
            "    where = [sys.prefix, torch.__version__, torch.__file__]\n"
            f"    pathlib.Path({str(marker)!r}).write_text(json.dumps(where))\n"
            "    raise ValueError('stop here')\n")


def stop_after_saying_where(project: Path, marker: Path) -> None:
    """Turn ``project`` (a copy of the sample) into one whose build stops at once and, under
    on-failure = "warn", still makes a wheel: plain, with the workload that says where it ran."""
    rewrite(project, WORKLOAD_TABLE + 'on-failure = "warn"\n', says_where_it_ran(marker))


def assert_fix_rebuilds(python: Path, tmp_path: Path, env: dict[str, str], expected: str,
                        change_source: Callable[[Path], None]) -> None:
    """A wheel for another torch (simulated by its manifest): the skip message's fix, run as printed,
    builds the package again from its source, runs the workload in this environment, and reinstalls
    it. ``change_source`` swaps the source for one whose workload records where it ran and stops (the
    same test's first install already showed that this frontend's build for this environment is warm;
    a second full compile would show nothing new). A reinstall of a cached wheel writes no record."""
    package_dir = Path(run([python, "-c", "import os, sample_pkg; print(os.path.dirname(sample_pkg.__file__))"],
                           env={"PRECOMPILE": "0"}).stdout.strip().splitlines()[-1])
    (manifest,) = (package_dir / "_precompiled" / "sets").glob("*/manifest.json")
    data = json.loads(manifest.read_text())
    data["env"]["torch"] = "2.0.0+elsewhere"
    manifest.write_text(json.dumps(data))
    code = "import json, sample_pkg; print(json.dumps(sample_pkg.precompile_status.reason))"
    reason = json.loads(run([python, "-c", code], env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c")}).stdout.splitlines()[-1])
    assert "built for torch='2.0.0+elsewhere'" in reason and reason.endswith("or run `hatch-precompile warm sample_pkg`")
    command = re.search(r"reinstall it from source, which builds for this environment: `([^`]+)`", reason)
    assert command, reason
    assert expected in command[1], command[1]
    marker = tmp_path / "fix-ran-the-workload-here.json"
    change_source(marker)
    run(shlex.split(command[1]), env=env)
    assert marker.exists(), "the fix reinstalled without building the package from its source"
    prefix, torch_version, _ = json.loads(marker.read_text())
    assert prefix == prefix_of(python) and torch_version == torch_of(python)
    assert not (package_dir / "_precompiled").exists(), "the fix did not replace the installed package"


def test_pip_install_builds_for_the_target_torch_and_writes_nothing_into_it(target, links, tmp_path):
    lib = Path(prefix_of(target)) / "lib"
    before = snapshot(lib)
    project = copy_project(tmp_path / "sample_pkg")
    # The default flow ships the exported step too: an isolated build exports it for the target's torch.
    proc = run([target, "-m", "pip", "install", "-v", project], env={**find_links(links), "HATCH_PRECOMPILE_NO_STEPS": "0"})
    assert_targets(proc.stdout, target, "pip's interpreter")
    assert "2 step(s) ahead of time" in proc.stdout
    section = build_env_section(proc.stdout)
    assert "hatchling" in section and "torch" not in section.lower(), section
    # The hook's dependencies(): the publishing tools it tags the wheel with, nothing of torch.
    (backend,) = re.findall(r"Installing backend dependencies: started\n(.*?)Installing backend dependencies: finished",
                            proc.stdout, re.S)
    assert "auditwheel" in backend and "torch" not in backend.lower(), backend
    # The build wrote nothing into the target's torch (pip then installed the wheel and its dependencies).
    changed = {p for p, mtime in snapshot(lib).items() if "/torch/" in p and before.get(p) != mtime}
    assert not changed, sorted(changed)[:5]
    assert_warm(target, tmp_path)
    assert_fix_rebuilds(target, tmp_path, find_links(links),
                        f"-m pip install --force-reinstall --no-deps --no-cache-dir {project}",
                        functools.partial(stop_after_saying_where, project))
    run([target, "-m", "pip", "uninstall", "-q", "-y", "sample-pkg"])


def test_pip_install_of_an_sdist_from_an_index(target, links, tmp_path):
    """An index with only the sdist: pip builds it in isolation, for the target's torch. pip builds an
    unpacked sdist as it builds a directory (the sample's whole workload is warm from there: the
    first test), so one compiled function shows this wheel warm."""
    index = tmp_path / "index"
    shutil.copytree(links, index)
    project = rewrite(copy_project(tmp_path / "src"), WORKLOAD_TABLE, one_function_workload())
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", index, project])
    proc = run([target, "-m", "pip", "install", "-v", "--no-index", "--find-links", index, "sample-pkg"])
    assert "sample_pkg-0.1.0.tar.gz" in proc.stdout
    assert_targets(proc.stdout, target, "pip's interpreter")
    assert "torch" not in build_env_section(proc.stdout).lower()
    assert_warm(target, tmp_path, one_function=True)
    # pip cached the wheel it built from the sdist: the fix must build again, not reuse it.
    def index_with_a_changed_sdist(marker: Path) -> None:
        changed = copy_project(tmp_path / "changed")
        stop_after_saying_where(changed, marker)
        (index / "sample_pkg-0.1.0.tar.gz").unlink()
        run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", index, changed])

    assert_fix_rebuilds(target, tmp_path, {"PIP_FIND_LINKS": str(index), "PIP_NO_INDEX": "1"},
                        "--no-cache-dir --no-binary sample-pkg sample-pkg", index_with_a_changed_sdist)
    run([target, "-m", "pip", "uninstall", "-q", "-y", "sample-pkg"])


def test_python_m_build_from_an_activated_venv(target, links, tmp_path):
    """build's own isolated env (not pip's); its wheel warm in the target, shown on one compiled function."""
    venv = Path(prefix_of(target))
    env = {"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", **find_links(links)}
    out = tmp_path / "dist"
    project = rewrite(copy_project(tmp_path / "sample_pkg"), WORKLOAD_TABLE, one_function_workload())
    proc = run([target, "-m", "build", "--wheel", "-o", out, project], env=env)
    assert "Creating isolated environment" in proc.stdout
    assert_targets(proc.stdout, target, "VIRTUAL_ENV")
    installed = proc.stdout.split("Installing packages in isolated environment", 1)[1].split("precompile:", 1)[0]
    assert "torch" not in installed, installed
    (wheel,) = out.glob("*.whl")
    assert_warm(target, tmp_path, pythonpath=unpack(wheel, tmp_path / "site"), one_function=True)


def test_python_m_build_without_activation_finds_the_venv_that_runs_it(target, links, tmp_path):
    project = project_with(tmp_path, WORKLOAD_TABLE, FAILING_AT_ONCE)  # the choice is all that is under test
    proc = run([target, "-m", "build", "--wheel", "-o", tmp_path / "dist", project], env=find_links(links),
               check=False)
    assert_targets(proc.stdout, target, "the interpreter that made the build venv")
    assert "ValueError: stop here" in proc.stdout


def test_uv_pip_install_and_uv_build(target, links, tmp_path):
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    assert uv, "uv is a test dependency"
    env = {"UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    # One compiled function: the sample's whole workload ends warm through uv in test_pinned_installs.
    project = rewrite(copy_project(tmp_path / "sample_pkg"), WORKLOAD_TABLE, one_function_workload())
    proc = run([uv, "pip", "install", "-v", "--python", target, "--no-index", "--find-links", links, project], env=env)
    assert_targets(proc.stdout, target, "uv's --python")
    assert not re.search(r"Adding direct dependency: torch", proc.stdout), "uv's build env asked for torch"
    assert_warm(target, tmp_path, one_function=True)
    uv_env = {"PATH": f"{Path(uv).parent}:{os.environ['PATH']}", "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(links), **env}
    assert_fix_rebuilds(target, tmp_path, uv_env, f"uv pip install --python {target} --reinstall-package sample-pkg "
                        f"--no-deps --no-cache {project}", functools.partial(stop_after_saying_where, project))
    run([target, "-m", "pip", "uninstall", "-q", "-y", "sample-pkg"])

    # Activated instead of --python; a failing workload keeps these cheap: only the choice counts.
    failing = project_with(tmp_path / "failing", WORKLOAD_TABLE, FAILING_AT_ONCE)
    proc = run([uv, "pip", "install", "-v", "--no-index", "--find-links", links, failing],
               env={**env, "VIRTUAL_ENV": prefix_of(target)}, check=False)
    assert_targets(proc.stdout, target, "uv's VIRTUAL_ENV")
    assert "ValueError: stop here" in proc.stdout

    # `uv build` in a project that has its own .venv (here a link to the target venv).
    (failing / ".venv").symlink_to(prefix_of(target))
    proc = run([uv, "build", "--wheel", "-v", "--no-index", "--find-links", links], env=env, cwd=failing, check=False)
    assert (f"precompile: building artifacts for torch {torch_of(target)} of the target environment "
            f"{failing / '.venv'} (uv's .venv); the workload runs there") in proc.stdout, proc.stdout[-3000:]


FAILING_AT_ONCE = "def workload():\n    raise ValueError('stop here')\n"


def test_explicit_target_variable(target, links, tmp_path):
    """`hatch build` and other frontends that do not say: HATCH_PRECOMPILE_TARGET does."""
    project = project_with(tmp_path, WORKLOAD_TABLE, FAILING_AT_ONCE)
    env = {"HATCH_PRECOMPILE_TARGET": prefix_of(target), **find_links(links)}
    proc = run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", tmp_path / "out", project], env=env,
               check=False)
    assert_targets(proc.stdout, target, "HATCH_PRECOMPILE_TARGET")
    bad = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp_path / "out", project],
              env={**env, "HATCH_PRECOMPILE_TARGET": str(tmp_path / "nowhere")}, check=False)
    assert bad.returncode != 0
    assert f"HATCH_PRECOMPILE_TARGET='{tmp_path / 'nowhere'}': {tmp_path / 'nowhere'} does not run as a Python " \
           "interpreter" in bad.stdout


NEEDS_NUMPY = "import numpy\n\n\ndef workload():\n    pass\n"


def test_a_dependency_missing_in_the_target_is_named_and_nothing_is_left(target, links, tmp_path):
    """pip installs a project's dependencies after building its wheel: the workload cannot import them."""
    assert run([target, "-c", "import numpy"], check=False).returncode != 0
    venv = Path(prefix_of(target))
    before = snapshot(venv)
    project = project_with(tmp_path, WORKLOAD_TABLE, NEEDS_NUMPY)
    proc = run([target, "-m", "pip", "install", "-v", project], env=find_links(links), check=False)
    assert proc.returncode != 0
    assert "ModuleNotFoundError: No module named 'numpy'" in proc.stdout
    assert (
        f"precompile: the workload imports 'numpy', which the environment being installed into ({venv}) "
        "does not have yet"
    ) in proc.stdout
    assert snapshot(venv) == before, "the failed build left files in the target"

    warn = project_with(tmp_path / "warn", WORKLOAD_TABLE + 'on-failure = "warn"\n', NEEDS_NUMPY)
    out = tmp_path / "out"
    proc = run([target, "-m", "pip", "wheel", "-v", "--no-deps", "-w", out, warn], env=find_links(links))
    assert_targets(proc.stdout, target, "pip's interpreter")
    assert "precompile: the workload imports 'numpy'" in proc.stdout
    assert 'on-failure = "warn": building the wheel without precompiled artifacts' in proc.stdout
    (wheel,) = out.glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    assert snapshot(venv) == before
    with zipfile.ZipFile(wheel) as archive:
        assert not any("_precompiled" in n for n in archive.namelist())


def test_pip_install_on_a_machine_that_cannot_compile_gets_a_plain_wheel(target, links, tmp_path):
    """A slim container: no C++ compiler. The install works; one line says why nothing was precompiled."""
    out = tmp_path / "out"
    no_compiler = {"CXX": str(tmp_path / "no-g++"), **find_links(links)}
    proc = run([target, "-m", "pip", "wheel", "-v", "--no-deps", "-w", out, copy_project(tmp_path / "sample_pkg")],
               env=no_compiler)
    assert proc.stdout.count("precompile: this machine cannot build C++ kernels: No working C++ compiler found") == 1
    (wheel,) = out.glob("*.whl")
    assert wheel.name == "sample_pkg-0.1.0-py3-none-any.whl"
