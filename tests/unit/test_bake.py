"""bake's refusals and tags, in-process, on made-up wheels: nothing runs."""

from __future__ import annotations

import hashlib
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import SAMPLE, run

from hatch_precompile.errors import MissingTool, WheelError


def pyproject(requires: str, backend: str, more: str = "") -> str:
    """The sample's metadata, built by ``backend``, declaring its workload for bake."""
    return (f'[build-system]\nrequires = ["{requires}"]\nbuild-backend = "{backend}"\n\n'
            '[project]\nname = "sample_pkg"\nversion = "0.1.0"\ndescription = "the sample"\n'
            'dependencies = ["torch>=2.7", "hatch-precompile"]\n' + more
            + '\n[tool.hatch-precompile]\nworkload = "sample_pkg.precompile:workload"\n')


def project(dest: Path, pyproject: str) -> Path:
    shutil.copytree(SAMPLE / "sample_pkg", dest / "sample_pkg", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "pyproject.toml").write_text(pyproject)
    return dest


def bake(*args, check=True):
    return run([sys.executable, "-m", "hatch_precompile", "bake", *[str(a) for a in args]], check=check)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fake_wheel(dest: Path, requires: str = "torch>=2.7", files: dict[str, str] | None = None) -> Path:
    """A small plain wheel, as any backend writes one."""
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / "tiny-1.0-py3-none-any.whl"
    contents = {
        "tiny/__init__.py": "",
        "tiny/work.py": "def workload():\n    raise RuntimeError('the workload broke')\n",
        **(files or {}),
        "tiny-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\nRequires-Dist: {requires}\n",
        "tiny-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in contents.items():
            archive.writestr(name, text)
        archive.writestr("tiny-1.0.dist-info/RECORD", "".join(f"{n},,\n" for n in contents) + "tiny-1.0.dist-info/RECORD,,\n")
    return wheel


@pytest.mark.parametrize("args, message", [
    ([], "tiny-1.0-py3-none-any.whl declares no workload: give --workload MODULE:FUNCTION, or --project"),
    (["--workload", "tiny.work:workload", "--package", "other"], "has no package 'other' (from --workload)"),
    (["--workload", "nope"], "--workload 'nope' must look like 'package.module:function'"),
])
def test_bake_refuses_without_a_usable_declaration_and_leaves_the_input_alone(tmp_path, args, message):
    wheel = fake_wheel(tmp_path / "in")
    before = digest(wheel)
    proc = bake(wheel, "-o", tmp_path / "out", *args, check=False)
    assert proc.returncode == 2 and message in proc.stdout, proc.stdout
    assert digest(wheel) == before and not list((tmp_path / "out").glob("*.whl"))


def test_a_bad_table_is_named_with_its_option_and_file(tmp_path):
    wheel = fake_wheel(tmp_path / "in")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text('[tool.hatch-precompile]\nworkload = "tiny.work:workload"\n'
                                                      "timeout = -1\n")
    proc = bake(wheel, "-o", tmp_path / "out", "--project", tmp_path / "proj", check=False)
    assert proc.returncode == 2
    assert f"Option `timeout` in [tool.hatch-precompile] of {tmp_path / 'proj'} must be" in proc.stdout


def test_a_torch_the_wheel_does_not_accept_is_refused_before_anything_runs(tmp_path):
    wheel = fake_wheel(tmp_path / "in", requires="torch==2.7.0")
    proc = bake(wheel, "-o", tmp_path / "out", "--workload", "tiny.work:workload", check=False)
    assert proc.returncode == 2
    assert "tiny-1.0-py3-none-any.whl requires torch==2.7.0, and " in proc.stdout and "(--python)" in proc.stdout


@pytest.mark.parametrize("platforms, least", [
    (["manylinux2014_x86_64", "manylinux_2_24_x86_64"], "manylinux_2_24_x86_64"),
    (["manylinux_2_28_x86_64", "manylinux_2_24_x86_64"], "manylinux_2_28_x86_64"),
    (["linux_x86_64", "manylinux_2_24_x86_64"], "linux_x86_64"),
])
def test_the_baked_tag_is_the_least_compatible_of_the_inputs_and_the_kernels(platforms, least):
    from hatch_precompile.tools.wheelfile import least_compatible

    assert least_compatible(platforms) == least


@pytest.mark.parametrize("name, stem, python_abi, platforms", [
    ("Sample_Pkg-1.0-cp311-cp311-linux_x86_64.whl", "Sample_Pkg-1.0", "cp311-cp311", ["linux_x86_64"]),
    ("tiny-2.0-1b-py3-none-any.whl", "tiny-2.0-1b", "py3-none", ["any"]),
    ("m-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "m-1", "cp311-cp311",
     ["manylinux2014_x86_64", "manylinux_2_17_x86_64"]),
])
def test_wheel_names_are_read_by_packaging(name, stem, python_abi, platforms):
    from hatch_precompile.tools import wheelfile

    parsed = wheelfile.wheel_name(Path("dist") / name)
    assert (parsed.stem, f"{parsed.python}-{parsed.abi}", parsed.platforms) == (stem, python_abi, platforms)
    assert parsed.with_tag("cp311-cp311-manylinux_2_28_x86_64") == f"{stem}-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel_file = b"Wheel-Version: 1.0\nTag: py2.py3-none-any\nTag: cp311-cp311-linux_x86_64\n"
    assert wheelfile.platforms(wheel_file) == ["any", "linux_x86_64"]


@pytest.mark.parametrize("name", ["tiny-1.0.whl", "tiny-1.0-py3-none-any.zip", "tiny-x.y.z-py3-none-any.whl",
                                  "a-b-c-1.0-py3-none-any.whl"])
def test_a_file_name_that_is_not_a_wheels_is_refused_naming_it(name):
    from hatch_precompile.tools import wheelfile

    with pytest.raises(WheelError, match=f"{name} is not a wheel " + r"\(name-version\[-build\]"):
        wheelfile.wheel_name(name)


def test_bake_without_the_publishing_tools_stops_before_the_workload_naming_the_extra(tmp_path, monkeypatch):
    import importlib.util

    from hatch_precompile.tools import bake

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "auditwheel" else find_spec(name, *a))
    with pytest.raises(MissingTool, match=r"pip install 'hatch-precompile\[publish\]'"):
        bake.bake(tmp_path / "tiny-1.0-py3-none-any.whl", tmp_path / "out", python=sys.executable, say=print)
    assert not (tmp_path / "out").exists()


def test_bake_in_the_wheels_project_dir_reads_its_table_and_says_so(tmp_path, monkeypatch):
    from hatch_precompile.tools import bake, wheelfile

    wheel = fake_wheel(tmp_path / "in")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text(
        '[project]\nname = "Tiny"\n\n[tool.hatch-precompile]\nworkload = "tiny.work:workload"\ntimeout = 60\n')
    monkeypatch.chdir(tmp_path / "proj")
    contents = wheelfile.read_wheel(wheel)
    plan = bake.declaration(contents, "tiny-1.0.dist-info", wheel, (), None, None)
    assert plan.workloads == ("tiny.work:workload",) and plan.timeout == 60
    assert plan.source == "[tool.hatch-precompile] of ./pyproject.toml" and plan.torch_trace is None


def test_bakes_torch_trace_is_the_tables_relative_to_the_project_unless_the_variable_says(tmp_path, monkeypatch):
    from hatch_precompile.tools import bake, wheelfile

    wheel = fake_wheel(tmp_path / "in")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text(
        '[tool.hatch-precompile]\nworkload = "tiny.work:workload"\ntorch-trace = "trace"\n')
    contents = wheelfile.read_wheel(wheel)
    plan = bake.declaration(contents, "tiny-1.0.dist-info", wheel, (), None, tmp_path / "proj")
    assert plan.torch_trace == tmp_path / "proj" / "trace"
    monkeypatch.setenv("HATCH_PRECOMPILE_TORCH_TRACE", str(tmp_path / "ci-trace"))
    assert bake.declaration(contents, "tiny-1.0.dist-info", wheel, (), None, tmp_path / "proj").torch_trace == \
        tmp_path / "ci-trace"


def test_bake_in_another_projects_dir_refuses_naming_both(tmp_path, monkeypatch):
    wheel = fake_wheel(tmp_path / "in")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "pyproject.toml").write_text(
        '[project]\nname = "other-thing"\n\n[tool.hatch-precompile]\nworkload = "other.work:workload"\n')
    monkeypatch.chdir(tmp_path / "other")
    proc = bake(wheel, "-o", tmp_path / "out", check=False)
    assert proc.returncode == 2
    assert ("./pyproject.toml's [tool.hatch-precompile] is for project 'other-thing', and "
            "tiny-1.0-py3-none-any.whl is 'tiny''s: give --project DIR (or --workload) for this wheel") in proc.stdout


def test_record_is_csv_written_and_checked(tmp_path):
    """A name with a comma or a quote stays one field; a RECORD joined with plain commas (as
    hatch-precompile once wrote it) is not taken for a right one."""
    from hatch_precompile.tools import wheelfile

    contents = {"pkg/a,b.txt": b"comma", 'pkg/say "hi".txt': b"quote", "pkg/run.sh": b"#!/bin/sh\n",
                "pkg-1.dist-info/RECORD": b""}
    record = "pkg-1.dist-info/RECORD"
    target = tmp_path / "pkg-1-py3-none-any.whl"
    wheelfile.write_wheel(target, contents, {n: d for n, d in contents.items() if n != record}, record,
                          {"pkg/run.sh": (0o100755 << 16)})
    written = wheelfile.read_wheel(target)
    assert wheelfile.record_problem(written, record) is None
    assert written[record].decode().splitlines()[0].startswith('"pkg/a,b.txt",sha256=')
    assert wheelfile.read_modes(target)["pkg/run.sh"] >> 16 == 0o100755
    assert wheelfile.read_modes(target)["pkg/a,b.txt"] >> 16 == 0o100644
    joined = b"".join(row.encode() + b"\n" for row in written[record].decode().replace('"', "").splitlines())
    problem = wheelfile.record_problem({**written, record: joined}, record)
    assert problem is not None and problem.startswith("RECORD has a row of 4 fields, not 3: ['pkg/a', 'b.txt', 'sha256=")
    unlisted = {**written, "pkg/new.txt": b"new"}
    assert wheelfile.record_problem(unlisted, record) == "RECORD lists pkg/new.txt wrongly"
    absent = {n: d for n, d in written.items() if n != "pkg/run.sh"}
    assert wheelfile.record_problem(absent, record) == "RECORD lists pkg/run.sh, which the wheel lacks"


DECLARED = "tiny-1.0.dist-info/extra_metadata/hatch-precompile.json"


@pytest.mark.parametrize("declaration, messages", [
    ('{"format": 1, "package": "tiny", "workloads": ["tiny.work:workload"], "timeout": -1, "device": "gpu"}',
     [f"`timeout` in tiny-1.0-py3-none-any.whl's {DECLARED} must be a positive number of seconds, got -1",
      f"`device` in tiny-1.0-py3-none-any.whl's {DECLARED} must be one of "]),
    ("{not json", [f"tiny-1.0-py3-none-any.whl's {DECLARED} is not JSON"]),
])
def test_a_bad_declaration_is_named_field_by_field_not_replaced_by_defaults(tmp_path, declaration, messages):
    """A wheel's declaration is read with the hook table's own checks: every bad value named at once."""
    wheel = fake_wheel(tmp_path / "in", files={DECLARED: declaration})
    proc = bake(wheel, "-o", tmp_path / "out", check=False)
    assert proc.returncode == 2 and all(m in proc.stdout for m in messages), proc.stdout
    assert not list((tmp_path / "out").glob("*.whl"))


def test_a_declaration_reads_back_as_written_with_the_tables_defaults():
    from hatch_precompile.builder.options import OptionError, read_declaration
    from hatch_precompile.protocol import Declaration

    written = Declaration("tiny", ("tiny.work:workload",), 90.0, "cpu")
    assert read_declaration(written.dumps(), "f") == written
    assert read_declaration('{"format": 1, "package": "tiny", "workloads": ["tiny.work:workload"]}', "f") == \
        Declaration("tiny", ("tiny.work:workload",))
    assert read_declaration("", "f") is None and read_declaration('{"format": 2}', "f") is None  # none, or newer
    with pytest.raises(OptionError) as raised:
        read_declaration('{"format": 1, "workloads": ["nope"]}', "f")
    assert raised.value.problems == ["`package` in f is missing",
                                     "`workloads` in f: entry 'nope' must look like 'package.module:function'"]
