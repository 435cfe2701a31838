"""The command line's logic in-process: preferences, names, the per-user cache, workloads, phases."""

from __future__ import annotations

import sys

import pytest
from conftest import run
from packaging.utils import canonicalize_name

from hatch_precompile import protocol
from hatch_precompile.run import preferences, switch, usercache
from hatch_precompile.tools import report, targets

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
    package, _, names, source = targets.workloads("oldpkg")
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
    assert switch.decide("my_pkg", True, env) == (False, f"{file}: [my-pkg] enable = false")
    assert switch.decide("on.pkg", False, env) == (True, f"{file}: [on-pkg] enable = true")
    assert switch.decide("my-pkg", True, {**env, "PRECOMPILE": "1"}) == (True, "PRECOMPILE=1")
    assert switch.decide("my-pkg", True, {**env, "PRECOMPILE": "1", "PRECOMPILE_MY_PKG": "0"})[1] == "PRECOMPILE_MY_PKG=0"
    assert switch.decide("other", False, env) == (False, "enable = false")
    assert switch.decide("wheel-name", True, env, aliases=["my_pkg"])[0] is False
    assert switch.decide("my-pkg", True, {protocol.PREFERENCES_VAR: str(tmp_path / "absent.toml")}) == (True, "default")


def test_build_time_lookup_follows_virtual_env_only_when_asked(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / preferences.FILENAME).write_text("[my-pkg]\nenable = false\n")
    env = {"VIRTUAL_ENV": str(venv)}
    assert preferences.candidates(env, build=True)[-1] == venv / preferences.FILENAME
    assert switch.decide("my-pkg", True, env, build=True)[0] is False
    assert switch.decide("my-pkg", True, env) == (True, "default")  # load() never looks there


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

    from hatch_precompile.build import elf
    from hatch_precompile.tools import main_report

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "auditwheel" else find_spec(name, *a))
    with pytest.raises(elf.MissingTool, match=rf"^building {tmp_path}: .*pip install 'hatch-precompile\[publish\]'"):
        main_report._report_project(tmp_path)
