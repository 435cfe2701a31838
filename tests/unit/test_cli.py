"""The command line's logic in-process: preferences, names, the per-user cache, workloads, phases."""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import run
from packaging.utils import canonicalize_name

from hatch_precompile import protocol
from hatch_precompile.errors import MissingTool
from hatch_precompile.run import switch
from hatch_precompile.run.sets import usercache
from hatch_precompile.tools import command_targets, report

# load() before the package's own import: a disabled package returns before importing anything.
# (Enabled, load() reads the package through importlib.resources, which imports it, and its
# __init__ calls load() again: import the package first then, as STATUS_IMPORTED does.)
STATUS_IMPORTED = (
    "import json, sys, sample_pkg; r = sample_pkg.precompile_status; "
    "print(json.dumps([r.loaded, r.reason, 'torch' in sys.modules, 'tomlkit' in sys.modules]))"
)


def cli(python, *args, env=None, check=True, cwd=None):
    return run([python, "-m", "hatch_precompile", *args], env=env, check=check, cwd=cwd)


# -- report ----------------------------------------------------------------------------------------


def test_warm_without_a_known_workload_is_a_clear_error(tmp_path):
    proc = cli(sys.executable, "warm", "hatch_precompile", check=False, cwd=tmp_path,
               env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert proc.returncode == 2
    assert ("hatch-precompile warm: no workload known for 'hatch_precompile': no manifest names one "
            "(shipped or warmed), its distribution declares none and there is no hatch_precompile/precompile.py; "
            "pass --workload module:function") in proc.stdout


def test_warm_falls_back_to_the_conventional_workload_name(tmp_path, monkeypatch):
    """A wheel from before declarations were recorded, with nothing shipped or warmed."""
    (tmp_path / "oldpkg").mkdir()
    (tmp_path / "oldpkg" / "__init__.py").write_text("")
    (tmp_path / "oldpkg" / "precompile.py").write_text("def workload(): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    package, _, names, source = command_targets.workloads("oldpkg")
    assert (package, names, source) == ("oldpkg", ["oldpkg.precompile:workload"], "the conventional name")


# -- preferences -----------------------------------------------------------------------------------


PREFERENCES = """\
# Preferences of this environment, kept by hand.

[Sample_Pkg]   # the demo package
enable = true  # flip me
note = "anything else stays"

[other-pkg]
enable = false
"""


def test_disable_enable_round_trip_keeps_comments_and_layout(tmp_path):
    file = tmp_path / "prefs.toml"
    file.write_text(PREFERENCES)
    env = {protocol.PREFERENCES_VAR: str(file)}
    proc = cli(sys.executable, "disable", "sample-pkg", env=env)
    assert f"sample-pkg: [Sample_Pkg] enable = false in {file}" in proc.stdout
    assert file.read_text() == PREFERENCES.replace("enable = true  # flip me", "enable = false  # flip me")
    status = cli(sys.executable, "status", "sample_pkg", "other_pkg", "third", env=env).stdout
    assert f"preferences file: {file} (from {protocol.PREFERENCES_VAR}; exists)" in status
    assert "  [Sample_Pkg] enable = false\n  [other-pkg] enable = false\n" in status
    assert f"sample_pkg: off ({file}: [Sample_Pkg] enable = false)" in status
    assert f"other_pkg: off ({file}: [other-pkg] enable = false)" in status
    assert "third: on (default)" in status
    # Precedence: the environment switches beat the file.
    overridden = cli(sys.executable, "status", "sample_pkg", env={**env, "PRECOMPILE_SAMPLE_PKG": "1"}).stdout
    assert "sample_pkg: on (PRECOMPILE_SAMPLE_PKG=1)" in overridden

    cli(sys.executable, "enable", "SAMPLE.PKG", env=env)
    assert file.read_bytes() == PREFERENCES.encode()
    cli(sys.executable, "disable", "new_pkg", env=env)
    assert file.read_text() == PREFERENCES + "\n[new-pkg]\nenable = false\n"

    file.write_text(PREFERENCES.replace("enable = true", 'enable = "nope"'))
    broken = cli(sys.executable, "status", env=env, check=False)
    assert broken.returncode == 2
    assert f"preferences file {file}: [Sample_Pkg] enable must be true or false, got 'nope'" in broken.stdout
    bad_name = cli(sys.executable, "disable", "not a name", env=env, check=False)
    assert bad_name.returncode == 2 and "'not a name' is not a valid package name" in bad_name.stdout


@pytest.mark.parametrize("name", ["sample_pkg", "Sample.Pkg", "sample--_pkg", "torch", "A_B.c-D"])
def test_preference_names_normalise_like_packaging(name):
    assert protocol.canonical_name(name) == canonicalize_name(name)


def test_switch_precedence_with_a_preferences_file(tmp_path):
    file = tmp_path / "prefs.toml"
    file.write_text("[my-pkg]\nenable = false\n[on-pkg]\nenable = true\n")
    env = {protocol.PREFERENCES_VAR: str(file)}
    assert switch.enabled("my_pkg", True, env) == (False, f"{file}: [my-pkg] enable = false")
    assert switch.enabled("on.pkg", False, env) == (True, f"{file}: [on-pkg] enable = true")
    assert switch.enabled("my-pkg", True, {**env, "PRECOMPILE": "1"}) == (True, "PRECOMPILE=1")
    assert switch.enabled("my-pkg", True, {**env, "PRECOMPILE": "1", "PRECOMPILE_MY_PKG": "0"})[1] == "PRECOMPILE_MY_PKG=0"
    assert switch.enabled("other", False, env) == (False, "enable = false")
    assert switch.enabled("wheel-name", True, env, aliases=["my_pkg"])[0] is False
    assert switch.enabled("my-pkg", True, {protocol.PREFERENCES_VAR: str(tmp_path / "absent.toml")}) == (True, "default")


def test_build_time_lookup_follows_virtual_env_only_when_asked(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / switch.FILENAME).write_text("[my-pkg]\nenable = false\n")
    env = {"VIRTUAL_ENV": str(venv)}
    assert switch.candidates(env, build=True)[-1] == venv / switch.FILENAME
    assert switch.enabled("my-pkg", True, env, build=True)[0] is False
    assert switch.enabled("my-pkg", True, env) == (True, "default")  # load() never looks there


def test_user_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert usercache.package_dir("Sample_Pkg") == tmp_path / "xdg" / "hatch-precompile" / "sample-pkg"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert usercache.base_dir() == tmp_path / "home" / ".cache" / "hatch-precompile"
    env = {"torch": "2.13.0+cpu", "cuda": None}
    assert usercache.env_id(env) == usercache.env_id(dict(reversed(list(env.items()))))


def test_compile_time_phases_are_parsed():
    text = "TorchDynamo compilation metrics:\nFunction, Runtimes (s)\n_compile.compile_inner, 18.3\ncompile_file, 20.4\n"
    assert report.compile_phases(text) == [("_compile.compile_inner", 18.3), ("compile_file", 20.4)]


def test_report_of_a_project_without_the_publishing_tools_says_which_extra(tmp_path, monkeypatch):
    """`report ./mypkg` builds the wheel here: without auditwheel, the build would stop on it."""
    import importlib.util

    from hatch_precompile.tools import main_report

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "auditwheel" else find_spec(name, *a))
    with pytest.raises(MissingTool, match=rf"^building {tmp_path}: .*pip install 'hatch-precompile\[publish\]'"):
        main_report._report_project(tmp_path)


# -- the command line itself: help, defaults, --json, -q, -v -----------------------------------------


def main(capsys, *argv: str) -> tuple[int, str, str]:
    from hatch_precompile.tools import cli

    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


SUBCOMMANDS = ("report", "verify", "warm", "bake", "merge", "snoop", "disable", "enable", "status")


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_command_has_a_description_examples_and_the_output_options(command, capsys):
    with pytest.raises(SystemExit) as done:
        main(capsys, command, "--help")
    assert done.value.code == 0
    text = capsys.readouterr().out
    usage, summary, paragraph = text.split("\n\n")[:3]
    assert usage.startswith(f"usage: hatch-precompile {command} ") and summary.endswith(".")
    assert len(paragraph.split()) >= 25, "a paragraph that says what the command does"
    examples = text.split("\nexamples:\n", 1)[1].splitlines()
    assert examples and all(f"{line} ".startswith(f"  hatch-precompile {command} ") for line in examples)
    for option in ("--json", "-v, --verbose", "-q, --quiet"):
        assert f"  {option}" in text


def test_defaults_are_shown_where_there_are_some(capsys):
    from hatch_precompile.tools import cli

    helps = {name: parser.format_help() for name, parser in cli.parser()._subparsers._group_actions[0].choices.items()}
    flat = {name: " ".join(text.split()) for name, text in helps.items()}
    assert "where the baked wheels are written (default: wheelhouse)" in flat["bake"]
    assert "where the merged wheel is written (default: wheelhouse)" in flat["merge"]
    assert "seconds for all workloads (default: 1800)" in flat["verify"] and "(default: 1800)" in flat["warm"]
    assert "seconds for all workloads (default: the declared timeout, else 1800)" in flat["bake"]
    assert "leave out graphs compiled faster (default: 0)" in flat["snoop"]
    assert "(default: None)" not in " ".join(flat.values()) and "(default: False)" not in " ".join(flat.values())


def test_bake_and_merge_write_into_wheelhouse_by_default():
    from hatch_precompile.tools import cli

    assert cli.parser().parse_args(["bake", "a.whl"]).out == "wheelhouse"
    assert cli.parser().parse_args(["merge", "a.whl", "b.whl"]).out == "wheelhouse"
    assert cli.parser().parse_args(["bake", "-o", "out", "a.whl"]).out == "out"


def test_output_options_before_or_after_the_command():
    from hatch_precompile.tools import cli

    for argv in (["--json", "-q", "status"], ["status", "--json", "-q"]):
        args = cli.parser().parse_args(argv)
        assert (args.json, args.quiet, args.verbose) == (True, 1, 0), argv
    assert cli.parser().parse_args(["-v", "status"]).verbose == 1
    assert cli.parser().parse_args(["status"]).json is False


def test_status_and_the_switches_as_json(tmp_path, monkeypatch, capsys):
    file = tmp_path / "prefs.toml"
    monkeypatch.setenv(protocol.PREFERENCES_VAR, str(file))
    monkeypatch.setenv("PRECOMPILE_OTHER_PKG", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    code, out, _ = main(capsys, "disable", "--json", "Sample.Pkg", "other_pkg")
    assert code == 0
    doc = json.loads(out)
    assert doc["format"] == 1 and doc["preferences_file"] == str(file)
    assert [(p["name"], p["table"], p["enable"], p["effective"], p["why"]) for p in doc["packages"]] == [
        ("Sample.Pkg", "sample-pkg", False, False, f"{file}: [sample-pkg] enable = false"),
        ("other_pkg", "other-pkg", False, True, "PRECOMPILE_OTHER_PKG=1"),
    ]
    code, out, _ = main(capsys, "--json", "status", "sample_pkg")
    doc = json.loads(out)
    assert code == 0 and doc["format"] == 1
    assert doc["preferences_file"] == {"path": str(file), "from": protocol.PREFERENCES_VAR, "exists": True,
                                       "switches": {"sample-pkg": False, "other-pkg": False}}
    assert doc["environment_switches"] == {"PRECOMPILE_OTHER_PKG": "1"}
    assert doc["user_cache"] == {"directory": str(tmp_path / "xdg" / "hatch-precompile"), "packages": []}
    assert doc["packages"] == [{"name": "sample_pkg", "enabled": False, "why": f"{file}: [sample-pkg] enable = false"}]
    assert doc["installed"] == []  # no installed package of the suite's venv ships artifacts
    code, out, _ = main(capsys, "-q", "status")
    assert code == 0 and out.startswith("installed packages that ship artifacts: none\n"
                                        f"preferences file: {file} (from {protocol.PREFERENCES_VAR}; exists)\n")


@pytest.mark.parametrize(("argv", "command", "kind", "message", "exit_code"), [
    (["merge", "--json", "a.whl"], "merge", "MergeError", "give two wheels or more", 2),
    (["bake", "--json", "--timeout", "0", "a.whl"], "bake", "UsageError", "--timeout must be positive", 2),
    (["--json", "warm", "no_such_package_anywhere"], "warm", "TargetNotFound",
     "no installed package named 'no_such_package_anywhere'", 2),
    (["snoop", "--json", "--", "no-such-tool"], "snoop", "SnoopError",
     "'no-such-tool' is neither python (a script, -m module, -c code) nor a console script", 2),
    (["bake", "--json", "--timeout", "soon", "a.whl"], "bake", "UsageError",
     "hatch-precompile bake: error: argument --timeout: invalid float value: 'soon'", 2),
    (["--json", "status", "--no-such-flag"], "status", "UsageError",
     "hatch-precompile: error: unrecognized arguments: --no-such-flag", 2),
])
def test_an_error_under_json_is_a_json_document_with_the_same_exit_status(argv, command, kind, message, exit_code,
                                                                           capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        code, out, err = main(capsys, *argv)
    except SystemExit as exc:  # argparse's own usage errors exit from parse_args
        code, (out, err) = exc.code, capsys.readouterr()
    assert code == exit_code
    doc = json.loads(out)
    assert doc["format"] == 1 and set(doc) == {"format", "error"}
    assert (doc["error"]["command"], doc["error"]["kind"], doc["error"]["exit_code"]) == (command, kind, exit_code)
    assert doc["error"]["message"].startswith(message), doc
    assert message in err, "the error's line is said on stderr too, for a person"


def test_report_finding_nothing_is_one_document_with_the_error(tmp_path, capsys):
    import zipfile

    wheel = tmp_path / "plain-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("plain/__init__.py", "")
    code, out, err = main(capsys, "report", "--json", str(wheel))
    doc = json.loads(out)
    assert code == 1 and doc["format"] == 1 and doc["kind"] == "wheel" and doc["artifacts"] == []
    assert doc["error"]["kind"] == "NotFound" and doc["error"]["exit_code"] == 1
    assert doc["error"]["message"].startswith(f"{wheel} has no precompiled artifacts") and "has no precompiled" in err


def test_verbose_turns_on_the_debug_log_here_and_in_the_children(monkeypatch, capsys):
    import logging

    # set (not deleted) first, so that the "1" -v sets is undone after: deleting an absent variable
    # records nothing, and the worker's later fresh processes would all log at debug level
    monkeypatch.setenv(protocol.DEBUG_VAR, "0")
    logger = logging.getLogger("hatch_precompile")
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    monkeypatch.delattr(logger, "_hatch_precompile_debug", raising=False)
    main(capsys, "status", "-v")
    assert os.environ[protocol.DEBUG_VAR] == "1" and logger.level == logging.DEBUG
