"""The hook's configuration, in this process: every option with good, wrong and empty values, every
variable and the preferences file, with the exact messages (the real builds that show them are in
test_build_errors.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hatch_precompile.builder import options, settings
from hatch_precompile.builder.options import Options
from hatch_precompile.errors import OptionError

HOOK = "precompile"
WORKLOAD = {"workload": "mypkg.precompile:workload"}
README = Path(__file__).resolve().parents[2] / "README.md"


def parse(**table) -> Options:
    return options.parse({**WORKLOAD, **{k.replace("_", "-"): v for k, v in table.items()}}, HOOK)


def rejected(table: dict, message: str) -> None:
    with pytest.raises(OptionError) as caught:
        options.parse(table, HOOK)
    assert str(caught.value) == message


def bad(option: str, expected: str, found: str) -> str:
    return f"Option `{option}` for build hook `{HOOK}` must be {expected}, got {found}"


class TestWorkload:
    def test_one_or_several(self):
        assert parse().workloads == ("mypkg.precompile:workload",)
        assert options.parse({"workload": ["a.b:c", "d:e.f"]}, HOOK).workloads == ("a.b:c", "d:e.f")

    def test_wrong_type(self):
        rejected({"workload": ["a:b", 3]}, bad("workload", "a string or an array of strings", "['a:b', 3]"))
        rejected({"workload": {"a": "b"}}, bad("workload", "a string or an array of strings", "{'a': 'b'}"))

    def test_malformed_entry(self):
        rejected({"workload": ["a:b", "no-colon"]},
                 "Option `workload` for build hook `precompile`: entry 'no-colon' must look like 'package.module:function'")

    def test_empty_is_no_workload(self):
        assert options.parse({}, HOOK).workloads == () and options.parse({}, HOOK).import_package is None


class TestEnable:
    def test_good(self):
        assert parse().enable is True and parse(enable=False).enable is False

    def test_wrong_type(self):
        rejected({**WORKLOAD, "enable": 1}, bad("enable", "a boolean", "1"))
        rejected({**WORKLOAD, "enable": "false"}, bad("enable", "a boolean", "'false'"))


class TestTimeout:
    def test_good(self):
        assert parse().timeout == 1800.0 and parse(timeout=20).timeout == 20.0 and parse(timeout=0.5).timeout == 0.5

    @pytest.mark.parametrize(("value", "shown"), [("fast", "'fast'"), (0, "0"), (-1, "-1"), (True, "True")])
    def test_wrong(self, value, shown):
        rejected({**WORKLOAD, "timeout": value}, bad("timeout", "a positive number of seconds", shown))


@pytest.mark.parametrize(
    ("option", "choices", "default"),
    [("on-failure", ("error", "warn"), "error"), ("graph-breaks", ("off", "warn", "error"), "off"),
     ("recompiles", ("off", "warn", "error"), "off"), ("device", ("auto", "cpu", "cuda"), "auto"),
     ("cpu-target", ("portable", "native"), "portable")],
)
class TestChoices:
    def test_each_choice_and_the_default(self, option, choices, default):
        field = options.FIELDS[option].name
        assert getattr(options.parse(WORKLOAD, HOOK), field) == default
        for choice in choices:
            assert getattr(options.parse({**WORKLOAD, option: choice}, HOOK), field) == choice

    @pytest.mark.parametrize("value", ["ignore", "", 1, None])
    def test_anything_else(self, option, choices, default, value):
        rejected({**WORKLOAD, option: value}, bad(option, f"one of {', '.join(choices)}", repr(value)))


class TestPackage:
    def test_default_is_the_workloads_top_level_package(self):
        assert parse().import_package == "mypkg" and parse(package="my.sub").import_package == "my.sub"

    @pytest.mark.parametrize("value", ["not a name", "", "1abc", 3])
    def test_wrong(self, value):
        rejected({**WORKLOAD, "package": value}, bad("package", "an importable package name", repr(value)))


class TestCpuCapabilities:
    def test_good_lowercased_once_each(self):
        assert parse(cpu_capabilities=["DEFAULT", "avx2", "avx2"]).cpu_capabilities == ("default", "avx2")
        assert parse(cpu_capabilities=[]).cpu_capabilities == ()

    @pytest.mark.parametrize("value", ["avx2", ["avx 2"], [2], ["-avx"]])
    def test_wrong(self, value):
        rejected({**WORKLOAD, "cpu-capabilities": value},
                 bad("cpu-capabilities", 'an array of ATEN_CPU_CAPABILITY names (e.g. ["default", "avx2"])', repr(value)))


def test_unknown_options_are_named_each_with_the_one_meant_and_the_known_ones():
    rejected({**WORKLOAD, "workloads": "x:y", "timeot": 3, "colour": "blue"},
             "Unknown option `colour` for build hook `precompile`\n"
             "Unknown option `timeot` for build hook `precompile`: did you mean `timeout`?\n"
             "Unknown option `workloads` for build hook `precompile`: did you mean `workload`?\n"
             "Known options for build hook `precompile`: " + ", ".join(sorted(options.FIELDS)))
    # hatchling's own keys are meant too, in a hook's table
    rejected({**WORKLOAD, "dependency": []}, "Unknown option `dependency` for build hook `precompile`: did you "
             "mean `dependencies`?\nKnown options for build hook `precompile`: " + ", ".join(sorted(options.FIELDS)))


def test_every_bad_option_is_named_at_once_in_the_options_order():
    with pytest.raises(OptionError) as caught:
        options.parse({"workload": "no-colon", "timeout": "soon", "device": "tpu", "timeot": 3, "enable": 1}, HOOK)
    assert caught.value.problems == [
        "Option `workload` for build hook `precompile`: entry 'no-colon' must look like 'package.module:function'",
        bad("enable", "a boolean", "1"),
        bad("timeout", "a positive number of seconds", "'soon'"),
        bad("device", "one of auto, cpu, cuda", "'tpu'"),
        "Unknown option `timeot` for build hook `precompile`: did you mean `timeout`?",
        "Known options for build hook `precompile`: " + ", ".join(sorted(options.FIELDS)),
    ]
    assert str(caught.value) == "\n".join(caught.value.problems)


def test_bakes_table_is_named_as_a_file_and_has_no_hatchling_keys():
    where = "[tool.hatch-precompile] of ./pyproject.toml"
    with pytest.raises(OptionError) as caught:
        options.parse({**WORKLOAD, "dependencies": [], "timeut": 1}, HOOK, where=where)
    assert caught.value.problems == [
        f"Unknown option `dependencies` in {where}",
        f"Unknown option `timeut` in {where}: did you mean `timeout`?",
        f"Known options in {where}: " + ", ".join(sorted(options.FIELDS)),
    ]


class TestTorchTrace:
    def test_a_directory_relative_to_the_project_and_the_variable_beats_it(self, tmp_path):
        assert parse().torch_trace is None and parse(torch_trace="trace").torch_trace == "trace"
        assert settings.read({**WORKLOAD, "torch-trace": "trace"}, HOOK, "p", {}, root=tmp_path).torch_trace == \
            tmp_path / "trace"
        assert settings.read(WORKLOAD, HOOK, "p", {}, root=tmp_path).torch_trace is None
        env = {"HATCH_PRECOMPILE_TORCH_TRACE": str(tmp_path / "elsewhere")}
        assert settings.read({**WORKLOAD, "torch-trace": "trace"}, HOOK, "p", env, root=tmp_path).torch_trace == \
            tmp_path / "elsewhere"

    @pytest.mark.parametrize("value", ["", "  ", 3, ["a"], True])
    def test_wrong(self, value):
        rejected({**WORKLOAD, "torch-trace": value},
                 bad("torch-trace", "a directory (a path, relative to the project)", repr(value)))


def test_hatchlings_own_keys_are_not_unknown():
    table = {**WORKLOAD, "dependencies": [], "enable-by-default": True, "require-runtime-dependencies": True,
             "require-runtime-features": []}
    assert options.parse(table, HOOK).workloads == ("mypkg.precompile:workload",)


def test_the_readme_table_is_the_dataclasss():
    assert options.documentation() in README.read_text(), "regenerate the README's table: options.documentation()"


# -- the environment and the preferences file, merged -----------------------------------------------


def test_switches_beat_the_preferences_file_which_beats_the_table(tmp_path):
    prefs = tmp_path / "prefs.toml"
    prefs.write_text("[mypkg]\nenable = false\n")
    env = {"HATCH_PRECOMPILE_PREFERENCES": str(prefs)}
    assert settings.read(WORKLOAD, HOOK, "my-pkg", env).enabled is False
    assert settings.read(WORKLOAD, HOOK, "my-pkg", {**env, "PRECOMPILE_MY_PKG": "1"}).why == "PRECOMPILE_MY_PKG=1"
    assert settings.read({**WORKLOAD, "enable": False}, HOOK, "other", {}).why == "enable = false"
    assert settings.read(WORKLOAD, HOOK, "other", {}).heartbeat == 30.0


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"PRECOMPILE": "maybe"}, "build hook `precompile`: PRECOMPILE='maybe' is not a valid switch value: use one of "
                                  "1, on, true, yes or 0, false, no, off"),
        ({"PRECOMPILE_MY_PKG": "2"}, "build hook `precompile`: PRECOMPILE_MY_PKG='2' is not a valid switch value"),
        ({"HATCH_PRECOMPILE_HEARTBEAT": "soon"},
         "build hook `precompile`: HATCH_PRECOMPILE_HEARTBEAT='soon' must be a positive number of seconds"),
        ({"HATCH_PRECOMPILE_HEARTBEAT": "0"},
         "build hook `precompile`: HATCH_PRECOMPILE_HEARTBEAT='0' must be a positive number of seconds"),
    ],
)
def test_bad_variables_are_named(environ, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        settings.read(WORKLOAD, HOOK, "my-pkg", environ)


def test_the_tables_and_the_variables_problems_are_said_together():
    with pytest.raises(OptionError) as caught:
        settings.read({**WORKLOAD, "timeot": 3}, HOOK, "my-pkg", {"PRECOMPILE": "maybe", "HATCH_PRECOMPILE_HEARTBEAT": "0"})
    assert [line.split(":")[0] for line in caught.value.problems] == [
        "Unknown option `timeot` for build hook `precompile`", "Known options for build hook `precompile`",
        "build hook `precompile`", "build hook `precompile`"]
    assert "PRECOMPILE='maybe'" in caught.value.problems[2] and "HEARTBEAT='0'" in caught.value.problems[3]


def test_a_bad_preferences_file_is_named(tmp_path):
    prefs = tmp_path / "prefs.toml"
    prefs.write_text("[my-pkg]\nenable = 'sometimes'\n")
    with pytest.raises(OptionError, match=re.escape(f"preferences file {prefs}: [my-pkg] enable must be true or false, "
                                                    "got 'sometimes'")):
        settings.read(WORKLOAD, HOOK, "my-pkg", {"HATCH_PRECOMPILE_PREFERENCES": str(prefs)})
