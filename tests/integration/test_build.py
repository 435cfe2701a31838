"""Building sample_pkg: with the hook on, off, as sdist, editable, and in pip's isolated env."""

from __future__ import annotations

import hashlib
import json
import re
import sys
import sysconfig
import tarfile
import zipfile
from importlib import metadata

import pytest
from conftest import ONE_FUNCTION, SAMPLE, TORCH_REQUIREMENT, build_wheel, copy_project, read_manifest, run

from integration.test_build_errors import WORKLOAD_TABLE, rewrite
from integration.test_install_flow import assert_warm, stop_after_saying_where

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

PREFIX = "sample_pkg/_precompiled/"


def wheel_tag(wheel) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read("sample_pkg-0.1.0.dist-info/WHEEL").decode()
    return re.findall(r"^Tag: (.+)$", text, re.M) + re.findall(r"^Root-Is-Purelib: (.+)$", text, re.M)


def test_precompiled_wheel_contents_and_tag(precompiled_wheel):
    wheel, output = precompiled_wheel
    assert "precompile: the workloads run without CI=true, as on users' machines" in output
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    # The most compatible tag auditwheel's policy allows for the kernels (test_portable.py).
    assert re.fullmatch(rf"sample_pkg-0\.1\.0-{py}-{py}-(manylinux_2_\d+|linux)_\w+\.whl", wheel.name)
    tags = wheel_tag(wheel)
    assert tags[0] == wheel.name.split("-", 2)[2].removesuffix(".whl") and tags[-1] == "false"

    manifest = read_manifest(wheel)
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n[len(PREFIX):]: archive.read(n) for n in archive.namelist() if n.startswith(PREFIX)}
    # One set; every file listed with its exact size and hash, stored once under its hash, and
    # nothing unlisted shipped.
    (set_manifest,) = [n for n in shipped if n.startswith("sets/")]
    assert set_manifest == f"sets/{manifest['env']['cpu_capability'].lower()}-{set_manifest.split('-')[-1]}"
    blobs = {n.removeprefix("blobs/"): data for n, data in shipped.items() if n.startswith("blobs/")}
    assert len(shipped) == len(blobs) + 1
    assert set(blobs) == {entry["sha256"] for entry in manifest["files"].values()}
    for digest, data in blobs.items():
        assert hashlib.sha256(data).hexdigest() == digest
    for entry in manifest["files"].values():
        assert entry["size"] == len(blobs[entry["sha256"]])

    files = manifest["files"]
    assert "megacache.bin" not in files and manifest["megacache"] is None  # nothing loaded it: not shipped
    # The second pass: the package's compiled functions as Dynamo cache entries, with their index.
    assert "dynamo/served.json" in files and sum(p.endswith(".entry") for p in files) == 3
    assert "precompile: 3 compiled function(s) served without Dynamo tracing them (3 guarded code(s))" in output
    # Proven with the steps left out: the replay runs the functions they stand for (a step's fallback).
    assert "precompile: served 3 of 3 compiled function(s) untraced, proven in a fresh process" in output
    # A package that ships steps installs its entries at torch.compile, none at its module's import:
    # a process on its step route (or one that never compiles) imports no compiler.
    with zipfile.ZipFile(wheel) as archive:
        index = json.loads(archive.read(PREFIX + "blobs/" + files["dynamo/served.json"]["sha256"]))
    at = {f["qualname"]: f.get("install_at", "compile") for f in index["functions"].values()}
    assert at == {"ConvNet.forward": "compile", "training_loss": "compile", "classify": "compile"}, at
    assert manifest["torchscript"] == {"classifier": "torchscript/classifier.pt"}
    assert any(p.startswith("inductor/aotautograd/") for p in files)
    assert any(p.startswith("inductor/fxgraph/") for p in files)
    assert sum(p.endswith(".so") for p in files) >= 5
    assert not any("/locks/" in p or p.endswith(".tmp") for p in files)
    assert manifest["kernels"], "CPU pybinding kernels must be recorded for relocation"

    env = manifest["env"]
    assert env["torch"] == metadata.version("torch")
    assert env["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert env["cpu_capability"] and "cxx" not in env, "any compiler of the family stands in"
    assert manifest["compiler"]["family"] == "gcc" and manifest["compiler"]["config"] == [None, "g++"]
    assert manifest["settings"] == {"cpp.dynamic_threads": True} and manifest["cpu_target"] == "portable"
    (workload,) = manifest["workloads"]
    assert workload["name"] == "sample_pkg.precompile:workload" and workload["seconds"] > 0
    assert workload["counters"]["aot_autograd"]["autograd_cache_miss"] >= 1

    with zipfile.ZipFile(wheel) as archive:
        declared = json.loads(archive.read(DECLARATION))
    assert declared["workloads"] == ["sample_pkg.precompile:workload"] and declared["package"] == "sample_pkg"

    assert "precompile: running workload sample_pkg.precompile:workload" in output
    # the steps' fallbacks: training (forward and backward in one entry) and classify; inference
    assert re.search(r"precompile: captured 3 compiled graph\(s\), \d+ kernel binaries, 1 TorchScript module\(s\), 2 step\(s\)", output)


def test_the_build_says_its_progress_folds_its_set_and_renders_torchs_trace(precompiled_build, precompiled_wheel):
    """Built as in a GitHub Actions job, with HATCH_PRECOMPILE_TORCH_TRACE and a heartbeat every 5 s
    (conftest.precompiled_build); tlparse is the test extra's, beside this Python."""
    output = precompiled_wheel[1]
    lines = output.splitlines()
    # The set's lines are one group of the job's log; the summary after it; the total last.
    start = lines.index("::group::precompile: running sample_pkg.precompile:workload")
    end = lines.index("::endgroup::")
    inside = lines[start:end]
    assert any(line.startswith("precompile: workload sample_pkg.precompile:workload finished in ") for line in inside)
    assert lines[end + 1].startswith("precompile: captured 3 compiled graph(s), ")
    (last,) = [line for line in lines if line.startswith("precompile: done in ")]
    assert re.fullmatch(r"precompile: done in [\d.]+ s: 1 artifact set\(s\); importing torch [\d.]+ s, the workloads "
                        r"[\d.]+ s, saving and laying out [\d.]+ s", last)
    assert [line for line in lines if line.startswith("precompile: ")][-1] == last
    # One line per graph as it compiles: the training loss's forward and its backward, then predict's
    # and classify's forward; the kernels the workload built so far, up to its summary's count.
    graphs = [re.fullmatch(r"precompile: graph (\d+)('s backward)? compiled in [\d.]+ s: (\w+) \(sample_pkg/model\.py:"
                           r"\d+\) \[\d+/0\]; (\d+) kernel\(s\) so far", line) for line in inside if " compiled in " in line]
    assert all(graphs) and [(g[1], bool(g[2]), g[3]) for g in graphs] == [
        ("1", False, "training_loss"), ("1", True, "training_loss"), ("2", False, "forward"), ("3", False, "classify")]
    kernels = [int(g[4]) for g in graphs]
    summary = re.search(r"finished in [\d.]+ s: 3 graph\(s\), .* (\d+) kernel\(s\)", output)
    assert kernels == sorted(kernels) and 0 < kernels[-1] <= int(summary[1])
    # The heartbeat names the phase: exporting the loss step takes longer than a beat.
    assert any(re.fullmatch(r"precompile: workload sample_pkg\.precompile:workload still running \(\d+ s\): "
                            r"capturing step 'loss' \(aotinductor route\) \(\d+ s\)", line) for line in inside)
    # torch's own compile report, rendered by tlparse: the package's compiled function and its graph.
    page = precompiled_build / "torch-trace" / "html" / "index.html"
    assert f"precompile: torch's compile report (tlparse): {page}" in inside
    html = page.read_text()
    assert "sample_pkg/model.py:59 in training_loss" in html and "sample_pkg/model.py:30 in forward" in html
    (graph,) = (page.parent / "-_0_0_0").glob("dynamo_output_graph_*.txt")
    assert f"-_0_0_0/{graph.name}" in html and "cross_entropy" in graph.read_text()


def test_the_build_leaves_in_the_temp_dir_only_torchs_prefix_header_for_the_users_torch(precompiled_wheel,
                                                                                        build_tmpdir):
    """Torch builds a ~150 MB prefix header per torch path and flags into a dir under the temp dir
    that outlives the process. A build without isolation runs on the user's own torch: the headers
    stay there, where the next build on it finds them (an isolated build env's torch leaves none:
    test_pinned_installs' Dockerfile flow). Nothing else is left."""
    left = sorted(p.relative_to(build_tmpdir) for p in build_tmpdir.rglob("*") if p.is_file())
    assert precompiled_wheel[0].exists()
    assert [p for p in left if not (p.parts[0].startswith("torchinductor_") and p.parts[1] == "precompiled_headers")] == []
    assert any(p.suffix == ".gch" for p in left), left


def wheel_members(wheel) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


DECLARATION = "sample_pkg-0.1.0.dist-info/extra_metadata/hatch-precompile.json"
RECORD = "sample_pkg-0.1.0.dist-info/RECORD"


def test_off_wheel_is_plain_hatchling_plus_the_declaration_and_needs_no_torch(notorch_python, tmp_path):
    project = copy_project(tmp_path / "sample_pkg")
    _, plain = build_wheel(project, tmp_path / "plain", python=notorch_python, env={"HATCH_BUILD_NO_HOOKS": "true"})
    plain_members = wheel_members(plain)
    for name, env in [
        ("global", {"PRECOMPILE": "0"}),
        ("per-package beats global", {"PRECOMPILE": "1", "PRECOMPILE_SAMPLE_PKG": "off"}),
    ]:
        proc, wheel = build_wheel(project, tmp_path / name, python=notorch_python, env=env)
        assert "precompile: off (PRECOMPILE" in proc.stdout, name
        assert wheel.name == "sample_pkg-0.1.0-py3-none-any.whl"
        members = wheel_members(wheel)
        # Exactly one file more than plain hatchling's wheel, and its line in RECORD; all else byte for byte.
        assert set(members) == set(plain_members) | {DECLARATION}, name
        assert all(members[n] == plain_members[n] for n in plain_members if n != RECORD), name
        extra = set(members[RECORD].decode().splitlines()) - set(plain_members[RECORD].decode().splitlines())
        assert [line.split(",")[0] for line in extra] == [DECLARATION], name
        assert json.loads(members[DECLARATION]) == {
            "format": 1, "package": "sample_pkg", "timeout": 1800.0, "workloads": ["sample_pkg.precompile:workload"],
            "device": "auto",
        }


def test_enable_false_is_a_default_the_environment_overrides(notorch_python, tmp_path):
    project = copy_project(tmp_path / "sample_pkg")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "enable = false\n")
    proc, wheel = build_wheel(project, tmp_path / "off", python=notorch_python)
    assert "precompile: off (enable = false)" in proc.stdout
    assert wheel.name.endswith("-py3-none-any.whl")
    # PRECOMPILE_SAMPLE_PKG=1 turns it back on: the hook asks for the project's torch requirement.
    proc, wheel = build_wheel(
        project, tmp_path / "on", python=notorch_python, env={"PRECOMPILE_SAMPLE_PKG": "1"}, check=False
    )
    assert proc.returncode != 0 and wheel is None
    assert "Unmet dependencies" in proc.stdout and "torch>=2.7" in proc.stdout


def test_invalid_switch_value_is_an_error_naming_the_variable(notorch_python, tmp_path):
    project = copy_project(tmp_path / "sample_pkg")
    proc, wheel = build_wheel(project, tmp_path / "out", python=notorch_python, env={"PRECOMPILE": "maybe"}, check=False)
    assert proc.returncode != 0 and wheel is None
    assert "PRECOMPILE='maybe' is not a valid switch value" in proc.stdout


def test_sdist_has_workload_source_but_no_artifacts(tmp_path):
    project = copy_project(tmp_path / "sample_pkg")
    out = tmp_path / "sdist"
    proc = run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", out, project])
    assert "running workload" not in proc.stdout
    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    assert any(n.endswith("sample_pkg/precompile.py") for n in names)
    assert not any("_precompiled" in n for n in names)


def test_editable_install_skips_with_one_line(notorch_python, tmp_path):
    project = copy_project(tmp_path / "sample_pkg")
    proc = run([notorch_python, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation", "-e", project])
    assert proc.stdout.count("precompile: editable install, workloads not run") == 1
    assert "running workload" not in proc.stdout


def test_isolated_pip_wheel_for_a_torchless_target_runs_the_workload_on_the_constrained_torch(hp_dist, notorch_python, tmp_path):
    """`pip wheel .` from an environment without torch: the workload runs on the build env's torch,
    the one PIP_CONSTRAINT pins (the venv's own pip applies it to the build env). That such a build's
    kernels, made at the build env's random path, hit in another venv: test_pinned_installs'
    Dockerfile flow. Here the workload records the torch it ran on and stops."""
    project, marker = copy_project(tmp_path / "sample_pkg"), tmp_path / "ran-on.json"
    stop_after_saying_where(project, marker)
    # Isolation resolves torch on its own (here it picked a CUDA 2.14 build once); pin it to ours.
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"{TORCH_REQUIREMENT}\n")
    proc = run(
        [notorch_python, "-m", "pip", "wheel", "-v", "--no-deps", "--find-links", hp_dist, "-w", tmp_path / "dist",
         project],
        env={"PIP_CONSTRAINT": str(constraints)},
    )
    prefix = run([notorch_python, "-c", "import sys; print(sys.prefix)"]).stdout.strip()
    assert re.search(
        rf"precompile: building artifacts for torch {re.escape(metadata.version('torch'))}\S* of the build "
        rf"environment \(\S*pip-build-env\S+\): the target environment {re.escape(prefix)} \(pip's "
        rf"interpreter\) has no torch yet, and pip was told to install {TORCH_REQUIREMENT} \(-c {constraints}",
        proc.stdout
    ), proc.stdout[-3000:]
    _, version, torch_file = json.loads(marker.read_text())
    assert version == metadata.version("torch") and "pip-build-env" in torch_file, (version, torch_file)


def test_a_build_without_isolation_or_auditwheel_takes_this_platforms_tag(notorch_python, tmp_path):
    """`pip install --no-build-isolation` where the publishing extra is not installed (notorch_python
    has hatchling and hatch-precompile, not auditwheel): a warm wheel with this platform's own tag,
    and one line saying how to get a manylinux one. The workload runs on the test environment's torch
    (HATCH_PRECOMPILE_TARGET); the tag is the build environment's business. The workload's module
    declares a step it never saves, which the build says once."""
    assert run([notorch_python, "-c", "import auditwheel"], check=False).returncode != 0
    source = ("import torch\n\nimport hatch_precompile\n\n"
              "unsaved = hatch_precompile.load_step('sample_pkg', 'unsaved', torch.sin)  # declared, never saved\n\n\n"
              f"def workload():\n    {ONE_FUNCTION}\n")
    project, site = rewrite(copy_project(tmp_path / "src"), WORKLOAD_TABLE, source), tmp_path / "site"
    proc = run([notorch_python, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation", "--target", site,
                project], env={"HATCH_PRECOMPILE_TARGET": sys.prefix})
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")  # linux_x86_64
    said = (f"precompile: platform tag {platform}, this machine's own (auditwheel, which finds the manylinux tag, is "
            "not installed here); for a manylinux tag to publish the wheel, build with hatch-precompile's publishing "
            "tools: pip install 'hatch-precompile[publish]'")
    assert proc.stdout.count(said) == 1, proc.stdout[-3000:]
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    (wheel_file,) = site.glob("sample_pkg-*.dist-info/WHEEL")
    assert re.findall(r"^Tag: (.+)$", wheel_file.read_text(), re.M) == [f"{py}-{py}-{platform}"]
    assert proc.stdout.count(
        "precompile: step 'unsaved' is declared by load_step but the workload never saved it: it runs its fallback, "
        "which the workload never called either, so it compiles at each user's first call") == 1, proc.stdout[-3000:]
    assert_warm(sys.executable, tmp_path, pythonpath=site, one_function=True)


def test_sample_pyproject_matches_the_documented_contract():
    text = (SAMPLE / "pyproject.toml").read_text()
    assert 'requires = ["hatchling", "hatch-precompile"]' in text
    assert 'workload = "sample_pkg.precompile:workload"' in text
