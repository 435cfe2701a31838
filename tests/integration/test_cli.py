"""The command line against real wheels, installs and builds: report, verify, warm, the switches, progress."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import build_wheel, copy_project, read_manifest, run, run_sample, set_manifest, unpack

from hatch_precompile import protocol
from hatch_precompile.run import switch
from integration.test_build_errors import GRAPH_BREAK_WORKLOAD, WORKLOAD_TABLE, project_with

FLOAT64_SOURCE = """

def to_double(x):
    return (x.double() * 3).sum()  # float64 inside a compiled graph


def float64_workload():
    torch.compile(to_double)(torch.ones(8))
"""
TWO_WORKLOADS = (
    "[tool.hatch.build.hooks.precompile]\n"
    'workload = ["sample_pkg.precompile:workload", "sample_pkg.precompile:float64_workload"]\n'
)
# load() before the package's own import: a disabled package returns before importing anything.
# (Enabled, load() reads the package through importlib.resources, which imports it, and its
# __init__ calls load() again: import the package first then, as STATUS_IMPORTED does.)
STATUS = (
    "import json, sys, hatch_precompile; r = hatch_precompile.load('sample_pkg'); "
    "print(json.dumps([r.loaded, r.reason, 'torch' in sys.modules, 'tomlkit' in sys.modules]))"
)
STATUS_IMPORTED = (
    "import json, sys, sample_pkg; r = sample_pkg.precompile_status; "
    "print(json.dumps([r.loaded, r.reason, 'torch' in sys.modules, 'tomlkit' in sys.modules]))"
)


def cli(python, *args, env=None, check=True, cwd=None):
    return run([python, "-m", "hatch_precompile", *args], env=env, check=check, cwd=cwd)


def split_run(cmd, env=None, cwd=None, timeout=1200):
    """Like conftest.run, but stdout and stderr apart (stdout must be the report alone)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PRECOMPILE", "HATCH_BUILD"))}
    full_env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    full_env.update(env or {})
    return subprocess.run([str(c) for c in cmd], env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


# -- report ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph_break_build(tmp_path_factory):
    """A sample_pkg copy whose workloads break a graph, recompile, and compute in float64."""
    tmp = tmp_path_factory.mktemp("graph-break")
    project = project_with(tmp, TWO_WORKLOADS, GRAPH_BREAK_WORKLOAD + FLOAT64_SOURCE)
    proc, wheel = build_wheel(project, tmp / "dist")
    return project, wheel, proc.stdout


def test_build_shows_per_workload_summary_and_float64(graph_break_build):
    project, _, output = graph_break_build
    source = project / "sample_pkg" / "precompile.py"
    assert "precompile: running workload sample_pkg.precompile:workload (1/2)" in output
    assert "precompile: running workload sample_pkg.precompile:float64_workload (2/2)" in output
    assert re.search(
        r"workload sample_pkg\.precompile:workload finished in [\d.]+ s: \d+ graph\(s\), [1-9]\d* graph break\(s\), "
        r"[1-9]\d* recompile\(s\), [1-9]\d* kernel\(s\), [\d.]+ MB", output
    )
    assert f"float64 computed in a compiled graph at {source}:{line_of(source, 'x.double()')} (to_double)" in output
    # a line per graph as it compiles, numbered across the workloads, the second's after its start
    second = output.index("precompile: running workload sample_pkg.precompile:float64_workload (2/2)")
    found = re.search(r"precompile: graph (\d+) compiled in [\d.]+ s: to_double \(sample_pkg/precompile\.py:\d+\) "
                      r"\[\d+/0\]; [1-9]\d* kernel\(s\) so far", output)
    assert found and found.start() > second and int(found[1]) > 1


def test_graph_breaks_and_recompiles_are_recorded_and_shown(graph_break_build):
    project, wheel, output = graph_break_build
    source = project / "sample_pkg" / "precompile.py"
    assert f"graph break at {source}:6: Dynamo does not know how to trace builtin operator `print`" in output
    assert "recompiled double_then_add" in output and "rank mismatch" in output
    manifest = read_manifest(wheel)
    (workload,) = [w for w in manifest["workloads"] if w["name"] == "sample_pkg.precompile:workload"]
    assert workload["graph_breaks"][0]["location"] == f"{source}:6"
    assert workload["recompiles"][0]["function"] == "double_then_add"
    assert workload["recompiles"][0]["location"] == f"{source}:4"
    assert any(p.endswith(".so") for p in manifest["files"]), "artifacts are still captured"


def test_report_on_a_wheel_lists_graph_breaks_recompiles_and_float64(graph_break_build):
    project, wheel, _ = graph_break_build
    source = project / "sample_pkg" / "precompile.py"
    proc = split_run([sys.executable, "-m", "hatch_precompile", "report", wheel])
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert f"sample_pkg: precompiled artifacts shipped, {wheel}!sample_pkg/_precompiled" in text
    assert "    torch           " in text and "cpu_capability" in text
    assert f"{source}:6: Dynamo does not know how to trace builtin operator `print`" in text
    assert f"double_then_add ({source}:4): 0/0: tensor 'x' rank mismatch" in text
    assert f"{source}:{line_of(source, 'x.double()')} in to_double" in text and "aten.mul.Tensor x1" in text
    # The graphs of each workload, largest compile time first, each with its source location.
    section = text.split("workload sample_pkg.precompile:workload:")[1].split("graph breaks:")[0]
    seconds = [float(s) for s in re.findall(r"^\s+([\d.]+) s  ", section, re.M)]
    assert len(seconds) >= 2 and seconds == sorted(seconds, reverse=True)
    assert f"double_then_add at {source}:4 [0/0" in section

    data = json.loads(split_run([sys.executable, "-m", "hatch_precompile", "report", "--json", wheel]).stdout)
    (artifacts,) = data["artifacts"]
    assert data["kind"] == "wheel" and artifacts["package"] == "sample_pkg" and artifacts["problem"] is None
    first, second = artifacts["summary"]["workloads"]
    assert first["graph_breaks"][0]["location"] == f"{source}:6"
    assert first["recompiles"][0]["function"] == "double_then_add"
    assert second["float64"][0]["ops"]["aten.mul.Tensor"] == 1
    assert artifacts["summary"]["kernel_binaries"] == sum(p.endswith(".so") for p in artifacts["manifest"]["files"])


@pytest.mark.slow
def test_report_on_a_project_dir_builds_it(tmp_path):
    table = '[tool.hatch.build.hooks.precompile]\nworkload = "sample_pkg.precompile:float64_workload"\n'
    project = project_with(tmp_path, table, "import torch\n" + FLOAT64_SOURCE)
    proc = split_run([sys.executable, "-m", "hatch_precompile", "report", "--json", project], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # The build's progress goes to stderr; stdout is the report alone.
    assert "precompile: running workload sample_pkg.precompile:float64_workload" in proc.stderr
    (artifacts,) = json.loads(proc.stdout)["artifacts"]
    assert artifacts["location"].startswith(f"{project} -> sample_pkg-0.1.0-cp")
    (workload,) = artifacts["summary"]["workloads"]
    assert workload["float64"] and workload["graphs"][0]["function"] == "to_double"


def test_report_on_an_installed_package(runtime_python, tmp_path):
    for name in ("sample-pkg", "sample_pkg"):
        proc = split_run([runtime_python, "-m", "hatch_precompile", "report", name], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "sample_pkg: precompiled artifacts shipped, " in proc.stdout
        assert re.search(r"\d+\.\d\d s  (training_loss|forward) at \S+/sample_pkg/model\.py:\d+ \[\d+/0", proc.stdout)
        assert "TorchScript modules     1" in proc.stdout
    missing = split_run([runtime_python, "-m", "hatch_precompile", "report", "no_such_pkg"], cwd=tmp_path)
    assert missing.returncode == 2
    assert "hatch-precompile report: no installed package named 'no_such_pkg'" in missing.stderr


def test_report_on_a_plain_wheel_says_there_is_nothing(notorch_python, tmp_path):
    proc, wheel = build_wheel(copy_project(tmp_path / "sample_pkg"), tmp_path / "out", python=notorch_python,
                              env={"PRECOMPILE": "0"})
    proc = split_run([notorch_python, "-m", "hatch_precompile", "report", wheel])
    assert proc.returncode == 1 and proc.stdout == ""
    assert "has no precompiled artifacts (built with the hook off, e.g. PRECOMPILE=0" in proc.stderr


# -- verify ----------------------------------------------------------------------------------------


def test_verify_passes_on_a_fresh_install(runtime_python, tmp_path):
    """Run in a package's CI, as verify is: CI=true, which the replay leaves out as the build did."""
    proc = split_run([runtime_python, "-m", "hatch_precompile", "verify", "sample_pkg", "--json"], cwd=tmp_path,
                     env={"CI": "true"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verify sample_pkg: the workloads run without CI=true, as on users' machines" in proc.stderr
    result = json.loads(proc.stdout)
    assert result["ok"] and result["misses"] == []
    assert result["load"]["loaded"] and result["load"]["installed"] > 0
    (workload,) = result["workloads"]
    assert workload["name"] == "sample_pkg.precompile:workload"
    # Its compiled functions served from their Dynamo cache entries: nothing traced, nothing looked up.
    assert {f: o.split(":")[0] for f, o in result["served"].items()} == {
        "sample_pkg.model.ConvNet.forward": "served", "sample_pkg.model.classify": "served"}, result["served"]
    assert workload["graphs"] == [] and not workload["counters"].get("aot_autograd", {}).get("autograd_cache_miss")
    assert workload["kernels_compiled"] == 0


def test_verify_fails_after_the_model_changes_without_a_rebuild(runtime_python, precompiled_wheel, tmp_path):
    site = unpack(precompiled_wheel[0], tmp_path / "site")
    model = site / "sample_pkg" / "model.py"
    text = model.read_text()
    changed = text.replace("nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, NUM_CLASSES)",
                           "nn.Linear(32 * 7 * 7, 48), nn.ReLU(), nn.Linear(48, NUM_CLASSES)")
    assert changed != text
    model.write_text(changed)
    proc = cli(runtime_python, "verify", "sample-pkg", env={"PYTHONPATH": str(site)}, check=False, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert "load(): installed (installed;" in proc.stdout  # the artifacts loaded; they are just stale
    assert re.search(
        rf"MISS: sample_pkg\.precompile:workload: the forward graph of (training_loss|forward) at {re.escape(str(model))}:"
        r"\d+ \[\d+/0\] was compiled from scratch \([\d.]+ s\): torch's cache key differs from the shipped graph's:",
        proc.stdout,
    )
    # Why, field by field: the layer's weight is an input of the graph, with another shape now.
    assert re.search(r"example_inputs\[\d+\]: shipped float32\[64, 1568\] .*, here float32\[48, 1568\]", proc.stdout)
    assert "C++ kernel(s) were compiled" in proc.stdout
    assert "FAILED: " in proc.stdout and "hatch-precompile warm sample_pkg" in proc.stdout


def test_verify_names_a_key_mismatch(runtime_python, precompiled_wheel, tmp_path):
    """Faked in the manifest, so that nothing compiles: only load()'s reason is under test."""
    site = unpack(precompiled_wheel[0], tmp_path / "site")
    path = set_manifest(site)
    data = json.loads(path.read_text())
    data["env"]["torch"] = "2.7.0+cpu"
    path.write_text(json.dumps(data))
    proc = cli(runtime_python, "verify", "sample_pkg", "--workload", "sample_pkg.model:make_model",
               env={"PYTHONPATH": str(site)}, check=False, cwd=tmp_path)
    assert proc.returncode == 1
    assert "MISS: load() installed nothing: built for torch='2.7.0+cpu', this environment has torch=" in proc.stdout
    bad = cli(runtime_python, "verify", "sample_pkg", "--workload", "no-colon", check=False, cwd=tmp_path)
    assert bad.returncode == 2 and "--workload 'no-colon' must look like 'package.module:function'" in bad.stdout


# -- warm ------------------------------------------------------------------------------------------


# `warm` twice at once: the second starts once the first runs its workload (it holds the lock then).
TWO_WARMS = """
umask 002
"$1" -m hatch_precompile warm sample-pkg > first.log 2>&1 &
first=$!
until grep -q "^precompile: " first.log; do kill -0 $first 2>/dev/null || break; sleep 0.1; done
"$1" -m hatch_precompile warm sample-pkg > second.log 2>&1 || echo "the second warm failed"
wait $first || echo "the first warm failed"
"""


def test_warm_turns_a_plain_install_into_a_warm_one(runtime_python, notorch_python, tmp_path):
    """A PRECOMPILE=0 wheel whose workload is not at the conventional <pkg>.precompile:workload."""
    project = copy_project(tmp_path / "sample_pkg")
    (project / "sample_pkg" / "precompile.py").rename(project / "sample_pkg" / "warmup.py")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("sample_pkg.precompile:workload", "sample_pkg.warmup:workload"))
    _, plain = build_wheel(project, tmp_path / "plain", python=notorch_python, env={"PRECOMPILE": "0"})
    assert plain.name.endswith("-py3-none-any.whl")
    site = unpack(plain, tmp_path / "site")
    xdg = tmp_path / "xdg"
    env = {"PYTHONPATH": str(site), "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(xdg)}
    loaded, reason, _, _ = json.loads(run([runtime_python, "-c", STATUS_IMPORTED], env=env).stdout.splitlines()[-1])
    assert not loaded and reason == "no precompiled artifacts shipped"

    # Nothing shipped, so no manifest names the workload: the wheel's .dist-info declares it. Two
    # warms at once, under umask 002: the second waits for the first, then takes what it stored.
    both = run(["sh", "-c", TWO_WARMS, "sh", runtime_python], env={**env, protocol.HEARTBEAT_VAR: "2"}, cwd=tmp_path)
    assert "failed" not in both.stdout, both.stdout
    first, second = (tmp_path / "first.log").read_text(), (tmp_path / "second.log").read_text()
    assert ("running sample_pkg.warmup:workload (from sample-pkg 0.1.0's "
            "extra_metadata/hatch-precompile.json)") in first
    assert "precompile: workload sample_pkg.warmup:workload still running (" in first
    assert re.search(r"finished in [\d.]+ s: 3 graph\(s\), 0 graph break\(s\), 0 recompile\(s\), [1-9]\d* kernel\(s\)", first)
    (entry,) = (p for p in (xdg / "hatch-precompile" / "sample-pkg").iterdir() if p.name != ".lock")
    assert "warm: stored " in first and str(entry) in first
    assert "warm: another `hatch-precompile warm sample_pkg` is running; waiting for it to finish" in second
    assert "warm: the other warm of sample_pkg stored its caches for this environment: using them" in second
    assert "precompile: running workload" not in second and str(entry) in second
    assert not (tmp_path / "home").exists(), "XDG_CACHE_HOME must be honoured"
    # What is stored is this user's only, whatever the umask: dirs 0700, nothing others may write.
    stored = [xdg / "hatch-precompile", *(xdg / "hatch-precompile").rglob("*")]
    assert [p for p in stored if p.is_dir() and stat.S_IMODE(p.stat().st_mode) != 0o700] == []
    assert [p for p in stored if stat.S_IMODE(p.stat().st_mode) & 0o022] == []

    cache = tmp_path / "cache"
    cache.mkdir()
    result = run_sample(runtime_python, cache, env={k: v for k, v in env.items() if k != "PYTHONPATH"},
                        pythonpath=site)
    assert result["precompiled"] and result["precompile_reason"].startswith(f"installed from {entry}")
    assert result["aot_autograd"].get("autograd_cache_miss", 0) == 0
    assert result["aot_autograd"]["autograd_cache_hit"] >= 1
    assert result["kernels_compiled"] == 0

    shown = cli(runtime_python, "report", "sample_pkg", env=env, cwd=tmp_path).stdout
    assert f"sample_pkg: precompiled artifacts stored by `hatch-precompile warm`, {entry}" in shown

    cleared = cli(runtime_python, "warm", "sample_pkg", "--clear", env=env, cwd=tmp_path)
    assert f"warm --clear: removed {xdg / 'hatch-precompile' / 'sample-pkg'}" in cleared.stdout
    assert not (xdg / "hatch-precompile" / "sample-pkg").exists()
    loaded, reason, _, _ = json.loads(run([runtime_python, "-c", STATUS_IMPORTED], env=env).stdout.splitlines()[-1])
    assert not loaded and reason == "no precompiled artifacts shipped"


def test_load_prefers_warmed_artifacts_over_mismatched_shipped_ones_and_checks_them(
    runtime_python, precompiled_wheel, tmp_path
):
    """A real build of this environment placed where `warm` stores it (no compile needed)."""
    site = unpack(precompiled_wheel[0], tmp_path / "site")
    shipped = site / "sample_pkg" / "_precompiled"
    env = {"PYTHONPATH": str(site), "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    data = json.loads(set_manifest(site).read_text())
    code = "import json, sys; from hatch_precompile.run.sets import usercache; print(usercache.env_dir('sample_pkg', json.loads(sys.argv[1])))"
    entry = Path(run([runtime_python, "-c", code, json.dumps(data["env"])], env=env).stdout.strip().splitlines()[-1])
    entry.parent.mkdir(parents=True)
    shutil.copytree(shipped, entry)
    data["env"]["torch"] = "2.7.0+cpu"
    set_manifest(site).write_text(json.dumps(data))

    loaded, reason, _, _ = json.loads(run([runtime_python, "-c", STATUS_IMPORTED], env=env).stdout.splitlines()[-1])
    assert loaded and reason == f"installed from {entry} (hatch-precompile warm)"
    # The stored files are checked like shipped ones: one altered byte and nothing is installed.
    kernel_path = next(p for p in data["files"] if p.endswith(".main.so"))
    kernel = entry / "blobs" / data["files"][kernel_path]["sha256"]
    blob = bytearray(kernel.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    kernel.write_bytes(bytes(blob))
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "cache2")
    loaded, reason, _, _ = json.loads(run([runtime_python, "-c", STATUS_IMPORTED], env=env).stdout.splitlines()[-1])
    assert not loaded and reason.endswith("does not match its sha256 in the manifest (altered or truncated)")
    assert not (tmp_path / "cache2").exists() or not any((tmp_path / "cache2").rglob("*.so"))
    shutil.rmtree(entry)
    loaded, reason, _, _ = json.loads(run([runtime_python, "-c", STATUS_IMPORTED], env=env).stdout.splitlines()[-1])
    assert not loaded and reason.startswith("built for torch='2.7.0+cpu'")
    assert reason.endswith("or run `hatch-precompile warm sample_pkg`")


def test_warm_does_nothing_when_the_shipped_artifacts_match(runtime_python, tmp_path):
    env = {"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    proc = cli(runtime_python, "warm", "sample_pkg", env=env, cwd=tmp_path)
    assert "shipped artifacts already match this environment" in proc.stdout
    scripted = split_run([runtime_python, "-m", "hatch_precompile", "warm", "--json", "sample_pkg"], env=env, cwd=tmp_path)
    document = json.loads(scripted.stdout)
    assert scripted.returncode == 0 and document["format"] == 1
    assert (document["package"], document["action"]) == ("sample_pkg", "already matching")
    assert document["matching"].startswith("torch ")
    assert not (tmp_path / "xdg").exists()


def test_load_honours_the_preferences_file_without_importing_torch(runtime_python, tmp_path):
    file = tmp_path / "prefs.toml"
    file.write_text("[sample-pkg]\nenable = false\n")
    env = {protocol.PREFERENCES_VAR: str(file), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    loaded, reason, torch_imported, tomlkit_imported = json.loads(
        run([runtime_python, "-c", STATUS], env=env).stdout.splitlines()[-1]
    )
    assert not loaded and reason == f"disabled by {file}: [sample-pkg] enable = false"
    assert not torch_imported and not tomlkit_imported
    loaded, reason, torch_imported, _ = json.loads(
        run([runtime_python, "-c", STATUS_IMPORTED], env={**env, "PRECOMPILE_SAMPLE_PKG": "1"}).stdout.splitlines()[-1]
    )
    assert loaded and reason == "installed" and torch_imported


def test_disabled_package_builds_a_plain_wheel_also_in_isolated_builds(notorch_python, hp_dist, tmp_path):
    """The file at the environment's default place, found by --no-isolation, pip's isolated build
    (same interpreter, so same sys.prefix) and `python -m build` (own venv: via VIRTUAL_ENV)."""
    prefix = Path(run([notorch_python, "-c", "import sys; print(sys.prefix)"]).stdout.strip())
    file = prefix / switch.FILENAME
    assert not file.exists()
    project = copy_project(tmp_path / "sample_pkg")
    why = f"precompile: off ({file}: [sample-pkg] enable = false); building a plain wheel"
    try:
        cli(notorch_python, "disable", "sample-pkg")
        proc, wheel = build_wheel(project, tmp_path / "no-isolation", python=notorch_python)
        assert why in proc.stdout and wheel.name == "sample_pkg-0.1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel) as archive:
            assert not any("_precompiled" in n for n in archive.namelist())

        out = tmp_path / "pip"
        proc = run([notorch_python, "-m", "pip", "wheel", "-v", "--no-deps", "--find-links", hp_dist, "-w", out, project])
        assert "Installing build dependencies" in proc.stdout  # isolated...
        assert why in proc.stdout  # ...yet the user's file is found
        assert [w.name for w in out.glob("*.whl")] == ["sample_pkg-0.1.0-py3-none-any.whl"]

        proc = run([notorch_python, "-m", "build", "--wheel", "-o", tmp_path / "build", project],
                   env={"VIRTUAL_ENV": str(prefix), "PIP_FIND_LINKS": str(hp_dist)})
        assert "Creating isolated environment" in proc.stdout and why in proc.stdout

        cli(notorch_python, "enable", "sample-pkg")
        # Enabled again: the hook asks for torch, which this venv does not have.
        proc, wheel = build_wheel(project, tmp_path / "enabled", python=notorch_python, check=False)
        assert wheel is None and "Unmet dependencies" in proc.stdout
    finally:
        file.unlink(missing_ok=True)  # the venv is shared with other tests


# -- progress --------------------------------------------------------------------------------------


SLEEPING_WORKLOAD = "import time\n\ndef workload():\n    time.sleep(3)\n"


def timed_lines(cmd, env):
    """Each output line with the second it arrived: progress must stream, not arrive at the end."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PRECOMPILE", "HATCH_BUILD"))}
    full_env.update(env)
    started = time.monotonic()
    proc = subprocess.Popen([str(c) for c in cmd], env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = [(time.monotonic() - started, line.rstrip("\n")) for line in proc.stdout]
    assert proc.wait() == 0, "\n".join(line for _, line in lines)
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("frontend", ["pip -v", "python -m build"])
def test_progress_lines_stream_during_the_build(tmp_path, frontend):
    project = project_with(tmp_path, WORKLOAD_TABLE, SLEEPING_WORKLOAD)
    if frontend == "pip -v":  # `pip wheel`: the same backend call and output handling as `pip install`
        cmd = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", tmp_path / "out", project]
    else:
        cmd = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", tmp_path / "out", project]
    lines = timed_lines(cmd, {protocol.HEARTBEAT_VAR: "0.5"})
    text = "\n".join(line for _, line in lines)
    start = next(t for t, line in lines if "precompile: running workload sample_pkg.precompile:workload" in line)
    importing = [t for t, line in lines if "precompile: still importing torch (" in line]
    beats = [t for t, line in lines if "precompile: workload sample_pkg.precompile:workload still running (" in line]
    assert importing and importing[-1] < start, "the phase before the workload has its heartbeat too"
    done = next(t for t, line in lines if re.search(
        r"precompile: workload sample_pkg\.precompile:workload finished in [\d.]+ s: 0 graph\(s\), "
        r"0 graph break\(s\), 0 recompile\(s\), 0 kernel\(s\), 0\.00 MB", line))
    assert len(beats) >= 3, text
    assert start < beats[0] < done and done - beats[0] > 1.5, "progress lines arrived late, all at once"


@pytest.mark.slow
def test_bad_heartbeat_value_fails_the_build_naming_the_variable(tmp_path):
    project = project_with(tmp_path, WORKLOAD_TABLE, SLEEPING_WORKLOAD)
    proc, wheel = build_wheel(project, tmp_path / "out", env={protocol.HEARTBEAT_VAR: "soon"}, check=False)
    assert wheel is None and "HATCH_PRECOMPILE_HEARTBEAT='soon' must be a positive number of seconds" in proc.stdout


# -- small pieces ----------------------------------------------------------------------------------
