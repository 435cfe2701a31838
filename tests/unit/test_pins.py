"""The torch an installer was told to install, read from the installer's process: in this process,
against real processes shaped like pip and uv (the installs themselves: test_install_flow.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hatch_precompile.builder import installer_pins, target_environment

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the installer is read from /proc")


@pytest.fixture
def installer(tmp_path):
    """Start a process whose command line is an installer's (``[python, .../pip, install, ...]`` or
    ``uv pip install ...``), in ``tmp_path``, with extra environment; yield its pid."""
    started = []

    def start(argv_tail: list[str], script: str = "pip", env: dict | None = None) -> int:
        fake = tmp_path / "bin" / script
        fake.parent.mkdir(exist_ok=True)
        if script == "pip":  # a console script: [python, .../bin/pip, ...]
            fake.write_text("import time\ntime.sleep(60)\n")
            argv = [sys.executable, str(fake), *argv_tail]
        else:  # a native program, as uv is: [.../uv, ...]
            source = tmp_path / "sleep.c"
            source.write_text("#include <unistd.h>\nint main(void) { sleep(60); return 0; }\n")
            subprocess.run(["cc", "-o", str(fake), str(source)], check=True)
            argv = [str(fake), *argv_tail]
        proc = subprocess.Popen(argv, cwd=tmp_path, env={**os.environ, **(env or {})})
        started.append(proc)
        for _ in range(100):  # until its command line is its own
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:2] == [a.encode() for a in argv[:2]]:
                break
            time.sleep(0.02)
        return proc.pid

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_pip_command_line_pin(installer):
    found = installer_pins.discover(pid=installer(["install", "-v", "torch==2.13.0", "./sample_pkg"]))
    assert found.frontend == "pip" and "torch==2.13.0" in found.requirements
    assert found.sources[found.requirements.index("torch==2.13.0")] == "pip's command line"


def test_pip_requirements_with_nested_files_and_markers(installer, tmp_path):
    (tmp_path / "base.txt").write_text("numpy\ntorch==2.13.0 ; sys_platform == 'linux'  # the CPU build\n")
    (tmp_path / "cons.txt").write_text("torch<2.14\n")
    (tmp_path / "requirements.txt").write_text(
        "-r base.txt\n--constraint cons.txt\n./sample_pkg\ntorch ; sys_platform == 'win32'\n"
        "torchvision==0.28.0 \\\n  --hash=sha256:00\n"
    )
    found = installer_pins.discover(pid=installer(["install", "-r", "requirements.txt"]))
    assert {"torch==2.13.0", "torch<2.14"} <= set(found.requirements)  # markers evaluated, none left
    assert all(";" not in r for r in found.requirements)


def test_pip_constraint_variable_and_config(installer, tmp_path):
    (tmp_path / "cons.txt").write_text("torch==2.13.0\n")
    (tmp_path / "pip.conf").write_text(f"[global]\nconstraint = {tmp_path / 'cons.txt'}\n")
    for env in ({"PIP_CONSTRAINT": "cons.txt"}, {"PIP_CONFIG_FILE": str(tmp_path / "pip.conf"), "PIP_CONSTRAINT": ""}):
        found = installer_pins.discover(pid=installer(["install", "./sample_pkg"], env=env))
        assert "torch==2.13.0" in found.requirements, env


def test_pips_own_parser_is_used_where_it_works_and_the_files_are_read_where_not(installer, tmp_path):
    (tmp_path / "cons.txt").write_text("torch==2.13.0\n")
    pid = installer(["install", "-c", "cons.txt", "./sample_pkg"])
    assert "torch==2.13.0" in installer_pins.discover(pid=pid).requirements
    frontend = installer_pins._frontend(pid)
    assert installer_pins._pip_parsed(frontend, ["install", "-c", "cons.txt"]) is not None  # this pip parses it
    broken = installer_pins.Frontend(["/no/such/python", "-m", "pip"], frontend.environ, frontend.cwd)
    assert installer_pins._pip_parsed(broken, ["install"]) is None
    assert ("torch==2.13.0", str(tmp_path / "cons.txt")) in installer_pins._read_args(["install", "-c", "cons.txt"], frontend, ())


def test_uv_pip_install(installer, tmp_path):
    (tmp_path / "req.txt").write_text("torch==2.13.0\n./sample_pkg\n")
    (tmp_path / "over.txt").write_text("torch>=2.12\n")
    pid = installer(["pip", "install", "--python", "venv/bin/python", "-r", "req.txt", "--find-links", "/opt/wheels"],
                    script="uv", env={"UV_OVERRIDE": "over.txt"})
    found = installer_pins.discover({"UV": str(tmp_path / "bin" / "uv")}, pid=pid)
    assert found.frontend == "uv" and set(found.requirements) == {"torch==2.13.0", "torch>=2.12"}


def test_nothing_pinned_is_no_pins(installer):
    no_config = {"PIP_CONFIG_FILE": os.devnull, "PIP_CONSTRAINT": ""}  # this machine caps torch in its config
    assert installer_pins.discover(pid=installer(["install", "torch", "./sample_pkg"], env=no_config)) is None
    assert installer_pins.discover(pid=installer(["build", "--wheel"], script="uv")) is None
    assert installer_pins.discover(pid=os.getpid()) is None  # not an installer: pytest


def test_a_direct_reference_pin_is_kept_and_matched_by_its_file_name():
    found = installer_pins._torch_pins("pip", [("torch @ file:///opt/wheels/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl", "x")])
    (pin,) = found.requirements
    assert target_environment._satisfies("2.13.0+cpu", pin) and not target_environment._satisfies("2.14.1", pin)
    assert not target_environment._satisfies("", "torch==2.13.0")


def test_the_build_env_gets_one_torch_requirement_that_all_of_them_allow():
    # hatchling sorts the requirements and pip reads the first one's newest torch before it
    # intersects: one requirement, so that only the pinned torch is ever looked at.
    assert installer_pins.merged(["torch==2.13.0", "torch<=2.14.1", "torch>=2.7"]) == ["torch<=2.14.1,==2.13.0,>=2.7"]
    assert installer_pins.merged(["torch==2.13.0", 'torch>=2.7; python_version < "3"']) == ["torch==2.13.0"]
    direct = "torch @ https://example.org/torch-2.13.0-cp311-cp311-linux_x86_64.whl"
    assert installer_pins.merged([direct, "torch>=2.7"]) == [direct, "torch>=2.7"]
