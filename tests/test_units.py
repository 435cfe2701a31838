"""Small pure pieces, checked against the real thing where there is one."""

from __future__ import annotations

import sys

import pytest

from hatch_precompile import protocol
from hatch_precompile.protocol import Manifest, ManifestError
from hatch_precompile.run import gate
from hatch_precompile.run import relocate


@pytest.mark.parametrize(
    ("env", "default", "expected"),
    [
        ({}, True, (True, "default")),
        ({}, False, (False, "enable = false")),
        ({"PRECOMPILE": "0"}, True, (False, "PRECOMPILE=0")),
        ({"PRECOMPILE": "Off"}, True, (False, "PRECOMPILE=Off")),
        ({"PRECOMPILE": "yes"}, False, (True, "PRECOMPILE=yes")),
        ({"PRECOMPILE": "0", "PRECOMPILE_MY_PKG": "1"}, True, (True, "PRECOMPILE_MY_PKG=1")),
        ({"PRECOMPILE": "1", "PRECOMPILE_MY_PKG": "false"}, True, (False, "PRECOMPILE_MY_PKG=false")),
        ({"PRECOMPILE": " "}, True, (True, "default")),
    ],
)
def test_gate_precedence(env, default, expected):
    assert gate.decide("my-pkg", default, env) == expected
    assert gate.decide("My.Pkg", default, env) == expected


def test_gate_rejects_garbage():
    with pytest.raises(gate.GateValueError, match="PRECOMPILE_MY_PKG='maybe'"):
        gate.decide("my_pkg", True, {"PRECOMPILE_MY_PKG": "maybe"})


@pytest.mark.parametrize(
    "path",
    ["../x", "a/../../x", "/etc/passwd", "a//b", "./a", "a\\b", "", "a/", None, 3, "C:/x", "c:x", "a:stream",
     "x/.hidden", "NUL", "x/com1.txt", "a\x00b", "x/" + "y" * 300],
)
def test_unsafe_manifest_paths(path):
    assert not protocol.is_safe_relpath(path)


def test_manifest_rejects_escaping_paths_and_unknown_format():
    good = b'{"format": 3, "env": {}, "files": {"inductor/a/b": {"size": 1, "sha256": "' + b'0' * 64 + b'"}}}'
    assert Manifest.parse(good).files
    with pytest.raises(ManifestError, match="outside its directory"):
        Manifest.parse(good.replace(b"inductor/a/b", b"../../b"))
    with pytest.raises(ManifestError, match="format 4 is not the supported format 3"):
        Manifest.parse(good.replace(b'"format": 3', b'"format": 4'))
    with pytest.raises(ManifestError, match="lacks size or sha256"):
        Manifest.parse(good.replace(b'"size": 1, ', b""))


def test_code_key_mirrors_inductor():
    codecache = pytest.importorskip("torch._inductor.codecache")
    for source, extra in [("  int x;\n", "g++ -I/a/torch/include -O3"), ("int y;", "")]:
        assert relocate.code_key(source, extra) == codecache.get_hash(source.strip(), extra)


def test_template_round_trip():
    values = {relocate.TORCH_DIR: "/v/site-packages/torch", relocate.PY_INCLUDE: "/py/include/python3.11",
              relocate.PY_INCLUDE_POSIX: "/py/include/python3.11"}
    command = "g++ -I/py/include/python3.11 -I/v/site-packages/torch/include -I/v/site-packages/torch/include/api"
    template = relocate.to_template(command, values)
    assert "/v/" not in template and "/py/" not in template
    moved = dict(values, **{relocate.TORCH_DIR: "/w/torch"})
    assert relocate.render(template, moved) == command.replace("/v/site-packages/torch", "/w/torch")


def test_supported_torch_range(capsys):
    from hatch_precompile.build import worker

    assert worker.supported_torch_problem("2.6.0+cpu") == (
        "torch 2.6.0+cpu is older than 2.7, the oldest hatch-precompile supports"
    )
    assert worker.supported_torch_problem("2.7.1+cu126") is None and capsys.readouterr().out == ""
    assert worker.supported_torch_problem("2.16.0.dev20261201") is None
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
    from hatch_precompile.build import target

    assert target._option(argv, "--python", "-p") == expected


def test_the_creator_of_a_frontend_build_venv_is_the_target(tmp_path, monkeypatch):
    from hatch_precompile.build import target

    for name, expected in [("build-env-x1y2", "/work/venv/bin/python"), ("my-own-venv", None)]:
        venv = tmp_path / name
        venv.mkdir()
        (venv / "pyvenv.cfg").write_text(f"home = /usr/bin\ncommand = /work/venv/bin/python -m venv --without-pip {venv}\n")
        monkeypatch.setattr(sys, "prefix", str(venv))
        found = target._venv_creator({})
        assert (found[0] if found else None) == expected, name
