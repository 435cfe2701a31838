"""Which torch a build is for: the supported range, uv's --python, the frontend's build venv."""

from __future__ import annotations

import sys

import pytest


def test_supported_torch_range(capsys):
    from hatch_precompile.child import build_child

    assert build_child.supported_torch_problem("2.6.0+cpu") == (
        "torch 2.6.0+cpu is older than 2.7, the oldest hatch-precompile supports"
    )
    assert build_child.supported_torch_problem("2.7.1+cu126") is None and capsys.readouterr().out == ""
    assert build_child.supported_torch_problem("2.16.0.dev20261201") is None
    assert "torch 2.16.0.dev20261201 is newer than 2.15, the newest tested" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["uv", "pip", "install", "--python", "v/bin/python", "."], "v/bin/python"),
        (["uv", "pip", "install", "--python=v/bin/python", "."], "v/bin/python"),
        (["uv", "pip", "install", "-p", "3.11", "."], "3.11"),
        (["uv", "build"], None),
    ],
)
def test_uv_python_option(argv, expected):
    from hatch_precompile.builder import target_environment

    assert target_environment._option(argv, "--python", "-p") == expected


def test_the_creator_of_a_frontend_build_venv_is_the_target(tmp_path, monkeypatch):
    from hatch_precompile.builder import target_environment

    for name, expected in [("build-env-x1y2", "/work/venv/bin/python"), ("my-own-venv", None)]:
        venv = tmp_path / name
        venv.mkdir()
        (venv / "pyvenv.cfg").write_text(f"home = /usr/bin\ncommand = /work/venv/bin/python -m venv --without-pip {venv}\n")
        monkeypatch.setattr(sys, "prefix", str(venv))
        found = target_environment._venv_creator({})
        assert (found[0] if found else None) == expected, name


def test_the_probe_reads_an_environment_that_has_neither_torch_nor_hatch_precompile(tmp_path, monkeypatch):
    """A user's fresh venv: the probe runs in its interpreter and may import only the standard library."""
    import subprocess

    from hatch_precompile.builder import target_environment

    monkeypatch.chdir(tmp_path)  # a project's dir, as in a build: not this checkout, whose package `-c` would see
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv"], check=True)
    found = target_environment.probe(str(tmp_path / "venv" / "bin" / "python"), {})
    assert found is not None and found.torch is None and found.prefix == str(tmp_path / "venv")
    assert found.site_packages and all("venv" in p for p in found.site_packages)
