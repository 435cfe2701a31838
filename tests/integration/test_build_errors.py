"""Bad configuration and bad workloads: clear messages, nothing left behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import zipfile
from pathlib import Path

import pytest
from conftest import build_wheel, copy_project, read_manifest

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

WORKLOAD_TABLE = '[tool.hatch.build.hooks.precompile]\nworkload = "sample_pkg.precompile:workload"\n'


def project_with(tmp_path, hook_table: str, workload_source: str | None = None):
    return rewrite(copy_project(tmp_path / "sample_pkg"), hook_table, workload_source)


def rewrite(project, hook_table: str, workload_source: str | None = None):
    """A copy of the sample, in place: ``hook_table`` for the sample's, ``workload_source`` for its workload."""
    pyproject = project / "pyproject.toml"
    assert WORKLOAD_TABLE in pyproject.read_text(), "the sample's hook table changed: update WORKLOAD_TABLE"
    pyproject.write_text(pyproject.read_text().replace(WORKLOAD_TABLE, hook_table))
    if workload_source is not None:
        (project / "sample_pkg" / "precompile.py").write_text(workload_source)
    return project


def test_raising_workload_fails_the_build_with_its_traceback(tmp_path):
    project = project_with(
        tmp_path, WORKLOAD_TABLE, "def workload():\n    helper()\n\ndef helper():\n    raise ValueError('boom')\n"
    )
    proc, wheel = build_wheel(project, tmp_path / "out", check=False)
    assert proc.returncode != 0 and wheel is None
    assert "precompile: workload 'sample_pkg.precompile:workload' failed" in proc.stdout
    assert "Traceback (most recent call last)" in proc.stdout
    assert re.search(r'precompile\.py", line 5, in helper', proc.stdout)
    assert "ValueError: boom" in proc.stdout


def test_raising_workload_with_on_failure_warn_builds_a_plain_wheel(tmp_path):
    project = project_with(
        tmp_path, WORKLOAD_TABLE + 'on-failure = "warn"\n', "def workload():\n    raise ValueError('boom')\n"
    )
    proc, wheel = build_wheel(project, tmp_path / "out")
    assert "ValueError: boom" in proc.stdout
    assert 'on-failure = "warn": building the wheel without precompiled artifacts' in proc.stdout
    assert wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert not any("_precompiled" in n for n in archive.namelist())


def test_missing_workload_function_names_it(tmp_path):
    table = '[tool.hatch.build.hooks.precompile]\nworkload = "sample_pkg.precompile:no_such_function"\n'
    proc, wheel = build_wheel(project_with(tmp_path, table), tmp_path / "out", check=False)
    assert proc.returncode != 0 and wheel is None
    assert "workload 'sample_pkg.precompile:no_such_function' failed" in proc.stdout
    assert "has no attribute 'no_such_function'" in proc.stdout


def logging_gxx(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A g++ first on PATH that logs each command line it runs: the PATH to give a command, and the
    log. Skips the test where there is no g++."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++")
    log, shim = tmp_path / "g++.log", tmp_path / "bin" / "g++"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec {gxx} "$@"\n')
    shim.chmod(0o755)
    return {"PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}, log


def test_a_second_build_on_the_machine_compiles_no_isa_probe(tmp_path):
    """Inductor compiles and loads a probe library per candidate vector ISA in each fresh cache dir,
    and every build's workload runs in one (~10 s a build here): a probe that passed is remembered
    in the user cache, and the next build on this machine compiles none."""
    path, log = logging_gxx(tmp_path)
    env = {**path, "XDG_CACHE_HOME": str(tmp_path / "user-cache")}
    # A probe library is the only thing linked (-shared) by a build whose workload never runs.
    table = '[tool.hatch.build.hooks.precompile]\nworkload = "sample_pkg.precompile:no_such_function"\n'
    linked = []
    for name in ("first", "second"):
        log.write_text("")
        proc, wheel = build_wheel(project_with(tmp_path / name, table), tmp_path / name / "out", env=env, check=False)
        assert wheel is None and "has no attribute 'no_such_function'" in proc.stdout
        linked.append(sum(" -shared " in f" {line} " for line in log.read_text().splitlines()))
    assert linked[0] > 0 and linked[1] == 0, linked


def test_hanging_workload_is_killed_at_timeout_with_its_children(tmp_path):
    pid_file = tmp_path / "child.pid"
    source = (
        "import os, subprocess, sys, time\n"
        "def workload():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"    open({str(pid_file)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "    time.sleep(600)\n"
    )
    # Long enough for torch's import on a loaded machine: the workload itself must be what hangs.
    project = project_with(tmp_path, WORKLOAD_TABLE + "timeout = 20\n", source)
    started = time.monotonic()
    proc, wheel = build_wheel(project, tmp_path / "out", check=False)
    assert time.monotonic() - started < 120
    assert proc.returncode != 0 and wheel is None
    assert "workload 'sample_pkg.precompile:workload' failed: timed out after 20 s" in proc.stdout
    for pid in map(int, pid_file.read_text().split()):
        assert not is_running(pid), f"process {pid} outlived the build"


def is_running(pid: int) -> bool:
    """Alive and not a zombie (killed orphans wait for an init that may not reap them)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_workload_that_compiles_nothing_ships_nothing(tmp_path):
    project = project_with(tmp_path, WORKLOAD_TABLE, "def workload():\n    pass\n")
    proc, wheel = build_wheel(project, tmp_path / "out")
    assert ("precompile: the workload 'sample_pkg.precompile:workload' compiled nothing (no torch.compile call ran "
            "and no TorchScript module was saved); building the wheel without precompiled artifacts") in proc.stdout
    assert wheel.name.endswith("-py3-none-any.whl")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        # Every option's messages are checked in process (test_options.py); these are the real
        # builds that show one of them, and the checks that need the project's files.
        (WORKLOAD_TABLE + 'workloads = "x:y"\ntimeot = 3\ntimeout = "soon"\n', (  # every one at once
            "Option `timeout` for build hook `precompile` must be a positive number of seconds, got 'soon'\n"
            "Unknown option `timeot` for build hook `precompile`: did you mean `timeout`?\n"
            "Unknown option `workloads` for build hook `precompile`: did you mean `workload`?\n"
            "Known options for build hook `precompile`: cpu-capabilities, ")),
        ("[tool.hatch.build.hooks.precompile]\n", "Option `workload` for build hook `precompile` is required"),
        (
            '[tool.hatch.build.hooks.precompile]\nworkload = "elsewhere.mod:fn"\n',
            "Option `package` for build hook `precompile` is 'elsewhere', but no such package directory exists",
        ),
    ],
)
def test_bad_options_fail_the_build_by_name_before_any_workload(tmp_path, table, message):
    proc, wheel = build_wheel(project_with(tmp_path, table), tmp_path / "out", check=False)
    assert proc.returncode != 0 and wheel is None
    assert message in proc.stdout
    assert "running workload" not in proc.stdout


def test_reserved_hatchling_keys_are_accepted(tmp_path):
    table = WORKLOAD_TABLE + "enable-by-default = true\ndependencies = []\nenable = false\n"
    proc, wheel = build_wheel(project_with(tmp_path, table), tmp_path / "out")
    assert wheel.name.endswith("-py3-none-any.whl")


def test_hanging_workload_with_on_failure_warn_builds_a_plain_wheel(tmp_path):
    source = "import time\ndef workload():\n    time.sleep(600)\n"
    project = project_with(tmp_path, WORKLOAD_TABLE + 'timeout = 3\non-failure = "warn"\n', source)
    proc, wheel = build_wheel(project, tmp_path / "out")
    assert "timed out after 3 s" in proc.stdout and "without precompiled artifacts" in proc.stdout
    assert wheel.name.endswith("-py3-none-any.whl")


GRAPH_BREAK_WORKLOAD = """\
import torch


def double_then_add(x):
    x = x * 2
    print("side effect")
    return x + 1


def workload():
    compiled = torch.compile(double_then_add)
    compiled(torch.ones(4))
    compiled(torch.ones(4, 4))  # another rank: a recompile
"""


def test_graph_breaks_and_unstable_recompiles_can_fail_the_build(tmp_path):
    """The analog of Lux's instability check, for a package's CI."""
    table = WORKLOAD_TABLE + 'graph-breaks = "warn"\nrecompiles = "error"\n'
    proc, wheel = build_wheel(project_with(tmp_path, table, GRAPH_BREAK_WORKLOAD), tmp_path / "out", check=False)
    assert proc.returncode != 0 and wheel is None
    source = tmp_path / "sample_pkg" / "sample_pkg" / "precompile.py"
    assert 'precompile: the workload shows 1 graph break(s) (`graph-breaks = "warn"`):' in proc.stdout
    assert f"{source}:6: print() inside the compiled function" in proc.stdout
    assert 'precompile: the workload shows 2 recompile(s) (`recompiles = "error"`):' in proc.stdout
    assert f"double_then_add ({source}:4): an input's number of dims changed" in proc.stdout


# -- workloads that need a GPU, on this machine without one ----------------------------------------

CUDA_WORKLOAD = "import torch\ndef workload():\n    torch.compile(torch.sin)(torch.ones(4, device='cuda'))\n"


def test_device_cuda_without_a_gpu_fails_before_running_the_workload(tmp_path, no_gpu):
    marker = tmp_path / "ran"
    source = f"def workload():\n    open({str(marker)!r}, 'w').close()\n"
    project = project_with(tmp_path, WORKLOAD_TABLE + 'device = "cuda"\n', source)
    proc, wheel = build_wheel(project, tmp_path / "out", check=False)
    assert proc.returncode != 0 and wheel is None and not marker.exists()
    assert "not run: `device = \"cuda\"` asks for a GPU" in proc.stdout
    assert "the workload needs CUDA, and this build has no usable GPU: torch 2.13.0+cpu is a CPU-only build" in proc.stdout


def test_device_cuda_without_a_gpu_and_on_failure_warn_builds_a_plain_wheel(tmp_path, no_gpu):
    project = project_with(tmp_path, WORKLOAD_TABLE + 'device = "cuda"\non-failure = "warn"\n')
    proc, wheel = build_wheel(project, tmp_path / "out")
    assert "this build has no usable GPU" in proc.stdout
    assert 'on-failure = "warn": building the wheel without precompiled artifacts' in proc.stdout
    assert wheel.name.endswith("-py3-none-any.whl")


def test_workload_that_fails_for_want_of_cuda_says_so(tmp_path, no_gpu):
    proc, wheel = build_wheel(project_with(tmp_path, WORKLOAD_TABLE, CUDA_WORKLOAD), tmp_path / "out", check=False)
    assert proc.returncode != 0 and wheel is None
    assert "Torch not compiled with CUDA enabled" in proc.stdout  # the traceback, as always
    assert "precompile: the workload needs CUDA, and this build has no usable GPU: torch 2.13.0+cpu" in proc.stdout


def test_device_cpu_hides_the_gpus_from_the_workload(tmp_path):
    source = (
        "import os, torch\n"
        "def workload():\n"
        "    assert os.environ['CUDA_VISIBLE_DEVICES'] == '' and not torch.cuda.is_available()\n"
        "    torch.compile(torch.sin)(torch.ones(4))\n"
    )
    project = project_with(tmp_path, WORKLOAD_TABLE + 'device = "cpu"\n', source)
    proc, wheel = build_wheel(project, tmp_path / "out")
    assert read_manifest(wheel)["env"]["gpu"] is None
    with zipfile.ZipFile(wheel) as archive:
        declaration = [n for n in archive.namelist() if n.endswith("extra_metadata/hatch-precompile.json")]
        assert json.loads(archive.read(declaration[0]))["device"] == "cpu"
