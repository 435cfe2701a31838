"""The switch's precedence: PRECOMPILE_<NAME>, PRECOMPILE, the preferences file, the default."""

from __future__ import annotations

import pytest

from hatch_precompile.errors import GateValueError
from hatch_precompile.run import switch, variables


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
    assert switch.enabled("my-pkg", default, env) == expected
    assert switch.enabled("My.Pkg", default, env) == expected


def test_gate_rejects_garbage():
    with pytest.raises(GateValueError, match="PRECOMPILE_MY_PKG='maybe'"):
        switch.enabled("my_pkg", True, {"PRECOMPILE_MY_PKG": "maybe"})


@pytest.mark.parametrize(("value", "expected"), [
    ("", False), (" ", False), ("0", False), ("false", False), ("No", False), ("off", False),
    ("1", True), ("true", True), ("YES", True), (" on ", True),
])
def test_no_steps_takes_the_switchs_values(value, expected):
    assert variables.no_steps({"HATCH_PRECOMPILE_NO_STEPS": value}) is expected
    assert variables.no_steps({}) is False


@pytest.mark.parametrize("value", ["2", "maybe", "disabled"])
def test_no_steps_rejects_anything_else_naming_the_variable(value):
    with pytest.raises(ValueError) as raised:
        variables.no_steps({"HATCH_PRECOMPILE_NO_STEPS": value})
    assert str(raised.value) == (f"HATCH_PRECOMPILE_NO_STEPS={value!r} is not a valid switch value: use one of "
                                 "1, on, true, yes or 0, false, no, off")
