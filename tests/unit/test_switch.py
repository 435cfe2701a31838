"""The switch's precedence: PRECOMPILE_<NAME>, PRECOMPILE, the preferences file, the default."""

from __future__ import annotations

import pytest

from hatch_precompile.run import gate


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
