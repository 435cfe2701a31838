"""The settings' JSON schema: the committed file is the one the options' dataclass makes, it takes
exactly what the build takes, and validate-pyproject, through the entry points, checks a project's
``[tool.hatch-precompile]`` and its hook tables with it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import tomllib

from hatch_precompile.builder import options, settings_schema
from hatch_precompile.errors import OptionError

fastjsonschema = pytest.importorskip("fastjsonschema")
api = pytest.importorskip("validate_pyproject.api")
errors = pytest.importorskip("validate_pyproject.errors")

HOOK = "precompile"
WORKLOAD = {"workload": "mypkg.precompile:workload"}


def test_the_committed_schema_is_the_one_the_options_make():
    assert settings_schema.stored() == settings_schema.generate(), \
        "regenerate it: python -m hatch_precompile.builder.settings_schema"
    assert set(settings_schema.tool_schema()["properties"]) == set(options.KNOWN)


# Each option with values the build takes and values it refuses, as a TOML file can write them.
VALUES = {
    "workload": (["a:b", "a.b:c.d", ["a:b", "c:d"], []], ["no-colon", 3, ["a:b", 3], {"a": "b"}, "a:b c"]),
    "enable": ([True, False], [1, "false"]),
    "timeout": ([1, 0.5, 1800], [0, -1, "soon", True]),
    "on-failure": (["error", "warn"], ["ignore", ""]),
    "package": (["mypkg", "my.sub"], ["not a name", "1abc", "", 3]),
    "cpu-capabilities": ([["default", "AVX2"], []], ["avx2", ["avx 2"], [2], ["-avx"]]),
    "graph-breaks": (["off", "warn", "error"], ["loud", 1]),
    "recompiles": (["off", "warn", "error"], ["on"]),
    "device": (["auto", "cpu", "cuda"], ["tpu"]),
    "cpu-target": (["portable", "native"], ["generic"]),
    "torch-trace": (["trace", "/tmp/t"], ["", "  ", 3, ["a"], True]),
    "dynamo-cache": ([True, False], [0, "false"]),
}


def parses(table: dict) -> bool:
    try:
        options.parse(table, HOOK)
    except OptionError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(VALUES))
def test_the_schema_takes_what_the_build_takes_and_refuses_what_it_refuses(name):
    assert set(VALUES) == set(options.KNOWN)
    hook = fastjsonschema.compile(settings_schema.hatch_schema()["definitions"]["hook"])
    good, bad = VALUES[name]
    for value, expected in [*((v, True) for v in good), *((v, False) for v in bad)]:
        table = {**WORKLOAD, name: value}
        try:
            hook(table)
            valid = True
        except fastjsonschema.JsonSchemaValueException:
            valid = False
        assert (parses(table), valid) == (expected, expected), (name, value)


def test_unknown_keys_and_hatchlings_own_keys():
    tool = fastjsonschema.compile(settings_schema.tool_schema())
    hook = fastjsonschema.compile(settings_schema.hatch_schema()["definitions"]["hook"])
    with pytest.raises(fastjsonschema.JsonSchemaValueException, match="timeot"):
        tool({**WORKLOAD, "timeot": 3})
    hatchling = {"dependencies": ["numpy"], "enable-by-default": False, "require-runtime-dependencies": True,
                 "require-runtime-features": ["gpu"]}
    assert hook({**WORKLOAD, **hatchling}) and parses({**WORKLOAD, **hatchling})
    with pytest.raises(fastjsonschema.JsonSchemaValueException):  # only a hook's table has them
        tool({**WORKLOAD, "dependencies": []})


PYPROJECT = """\
[build-system]
requires = ["hatchling", "hatch-precompile"]
build-backend = "hatchling.build"

[project]
name = "mypkg"
version = "1.0"

[tool.hatch.build.targets.wheel]
packages = ["mypkg"]

[tool.hatch.build.hooks.precompile]
workload = "mypkg.precompile:workload"
timeout = 600
dependencies = ["numpy"]

[tool.hatch.build.targets.wheel.hooks.precompile]
graph-breaks = "error"

[tool.hatch.build.hooks.vcs]
version-file = "mypkg/_version.py"

[tool.hatch.envs.default]
dependencies = ["pytest"]
whatever-hatch-adds = {next = "year"}

[tool.hatch-precompile]
workload = ["mypkg.precompile:workload"]
cpu-capabilities = ["default", "avx2"]
"""


def validate_pyproject(tmp_path, text: str) -> subprocess.CompletedProcess:
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    return subprocess.run([sys.executable, "-m", "validate_pyproject", str(path)], capture_output=True, text=True,
                          timeout=120)


def test_validate_pyproject_passes_a_good_pyproject_and_names_a_bad_option(tmp_path):
    good = validate_pyproject(tmp_path, PYPROJECT)
    assert good.returncode == 0 and "Valid file" in good.stdout, good.stdout + good.stderr
    bad = validate_pyproject(tmp_path, PYPROJECT.replace("timeout = 600", 'timeout = "soon"'))
    assert bad.returncode == 1
    assert "[ERROR] `tool.hatch.build.hooks.precompile.timeout` must be number" in bad.stdout + bad.stderr


@pytest.mark.parametrize(("change", "message"), [
    (('graph-breaks = "error"', 'graph-breaks = "loud"'),
     "`tool.hatch.build.targets.wheel.hooks.precompile.graph-breaks` must be one of ['off', 'warn', 'error']"),
    (('cpu-capabilities = ["default", "avx2"]', "timeot = 3"), "`tool.hatch-precompile` must not contain {'timeot'}"),
    (('workload = "mypkg.precompile:workload"\ntimeout', 'workload = "no-colon"\ntimeout'),
     "`tool.hatch.build.hooks.precompile.workload` must be valid exactly by one definition (0 matches found)"),
])
def test_validate_pyproject_through_the_entry_points(change, message):
    """In this process: the plugins as installed (pyproject.toml's entry points), as the command finds them."""
    validator = api.Validator()
    assert validator(tomllib.loads(PYPROJECT))
    with pytest.raises(errors.ValidationError) as caught:
        validator(tomllib.loads(PYPROJECT.replace(*change)))
    assert str(caught.value).startswith(message)


def test_hatchs_own_tables_are_left_to_hatch():
    hatch = fastjsonschema.compile(settings_schema.hatch_schema())
    assert hatch({"build": {"hooks": {"custom": {"path": "x.py"}}, "targets": {"sdist": {"exclude": ["/x"]}}},
                  "envs": {"default": {"anything": 1}}, "version": {"source": "vcs"}})
