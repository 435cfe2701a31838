"""Every touchpoint with torch's internals, made to misbehave: the build and the warm start go on.

tests/misbehave/sitecustomize.py breaks the named touchpoints in every process started with it
on PYTHONPATH. What hatch-precompile only observes (metrics, counters, logs, Mega-Cache, compile
times) may record less, never fail a build; what it wraps (codecache.write, the header
precompile, the ISA probe, torch_key, the system answer) passes through, never crashes the user's first step.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest
from conftest import build_wheel, copy_project, inference_warm, read_manifest, run, run_sample, unpack

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

MISBEHAVE = Path(__file__).resolve().parents[1] / "misbehave"
OBSERVERS = ("metrics,counters,guard-failures,logs,megacache,compile-times,write,dynamo-compile,"
             "compile-command,key-details,fx-key,aot-key,inductor-compile,count-calls,guard-eval,guard-expr")
SHORTCUTS = ("write,precompile-header,check-build,torch-key,triton-key,event-logger,compile-state,"
             "system,hash-details,autotune-recheck,cpp-compiler,compiler-search,intel-compiler,cache-dir")


def misbehaving(names: str, pythonpath: Path | None = None) -> dict[str, str]:
    path = str(MISBEHAVE) + (f":{pythonpath}" if pythonpath else "")
    return {"PYTHONPATH": path, "MISBEHAVE": names}


def test_the_helper_really_breaks_what_it_names(tmp_path):
    code = (
        "import torch, torch._dynamo.utils as u, torch.compiler\n"
        "for f in (u.get_compilation_metrics, torch.compiler.save_cache_artifacts):\n"
        "    try: f(); print('works')\n"
        "    except RuntimeError: print('broken')\n"
    )
    assert run([sys.executable, "-c", code], env=misbehaving("metrics,megacache")).stdout.split()[-2:] == ["broken"] * 2


def test_build_with_every_observer_broken_still_ships_working_artifacts(tmp_path, cold_result):
    proc, wheel = build_wheel(copy_project(tmp_path / "sample_pkg"), tmp_path / "dist", env=misbehaving(OBSERVERS))
    assert "precompile: captured 3 compiled graph(s)" in proc.stdout
    manifest = read_manifest(wheel)
    (workload,) = manifest["workloads"]
    # Each broken observer recorded nothing, and said so by leaving its part empty.
    assert workload["graphs"] == [] and workload["counters"] == {} and workload["recompiles"] == []
    assert workload["graph_breaks"] == [] and workload["float64"] is None
    assert manifest["megacache"] is None and manifest["compile_times"] is None
    assert manifest["kernels"] == []
    # The compile command could not be read: built as torch made it, and said so.
    assert manifest["cpu_target"] == "native" and manifest["cpu_features"]
    # The artifacts themselves are whole: where the build ran (no relocation needed), all hits.
    cache = tmp_path / "cache"
    cache.mkdir()
    result = run_sample(Path(sys.executable), cache, pythonpath=unpack(wheel, tmp_path / "site"))
    assert result["precompiled"] and result["kernels_compiled"] == 0, (result["precompile_reason"], result)
    assert result["aot_autograd"]["autograd_cache_hit"] >= 1 and not result["aot_autograd"].get("autograd_cache_miss")
    assert math.isclose(result["loss"], cold_result["loss"], rel_tol=1e-6)


def test_warm_start_with_every_wrapped_internal_changed_is_still_warm_and_correct(runtime_python, cold_result, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    result = run_sample(runtime_python, cache, env=misbehaving(SHORTCUTS))
    assert result["precompiled"] and result["kernels_compiled"] == 0, result
    assert inference_warm(result) and not result["aot_autograd"].get("autograd_cache_miss")
    # as test_runtime's warm start: the shipped kernels run for any thread count, and may round a
    # reduction's last bits otherwise than a cold compile with the count built in (an AMD EPYC does)
    assert result["loss"] == pytest.approx(cold_result["loss"], rel=1e-6)
    assert result["logits_sum"] == pytest.approx(cold_result["logits_sum"], rel=1e-6, abs=1e-5)


def test_a_stand_in_compiler_with_the_key_internals_changed_is_still_warm(runtime_python, cold_result, tmp_path):
    wrapper = tmp_path / "bin" / "g++-standin"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} "$@"\n')
    wrapper.chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir()
    result = run_sample(runtime_python, cache, env={**misbehaving("hash-details"), "CXX": str(wrapper)})
    assert result["precompiled"] and result["kernels_compiled"] == 0, result
    assert inference_warm(result) and not result["aot_autograd"].get("autograd_cache_miss")


def test_an_unreadable_environment_key_builds_a_plain_wheel_and_skips_at_load(runtime_python, tmp_path):
    proc, wheel = build_wheel(copy_project(tmp_path / "sample_pkg"), tmp_path / "dist", env=misbehaving("cpu-capability"))
    assert "precompile: cannot compute the environment key with torch" in proc.stdout
    assert "building the wheel without precompiled artifacts" in proc.stdout
    assert "running workload" not in proc.stdout, "found out before running the workload"
    assert wheel.name.endswith("-py3-none-any.whl")
    code = "import json, sample_pkg; s = sample_pkg.precompile_status; print(json.dumps([s.loaded, s.reason]))"
    loaded, reason = json.loads(run([runtime_python, "-c", code], env={
        **misbehaving("cpu-capability"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}).stdout.splitlines()[-1])
    assert not loaded and reason.startswith("unexpected error: RuntimeError('misbehaving on purpose')")
    assert not (tmp_path / "cache").exists()


def test_verify_without_counters_cannot_tell_and_fails(runtime_python, tmp_path):
    # The shipped Dynamo cache entries taken out too (precompile-entry): every compiled function is
    # traced, so only the counters could say whether its graphs came from the caches.
    proc = run([runtime_python, "-m", "hatch_precompile", "verify", "sample_pkg"],
               env=misbehaving("counters,precompile-entry"), check=False, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert "CANNOT TELL: sample_pkg.precompile:workload: torch reported no AOTAutograd cache counters" in proc.stdout
    assert "UNKNOWN: without torch's cache counters verify has no evidence" in proc.stdout
    assert "OK:" not in proc.stdout


def test_a_config_that_takes_no_settings_costs_a_compile_not_correctness(runtime_python, cold_result, tmp_path):
    """inductor-config: the set's cpp.dynamic_threads cannot be set; the shipped graphs miss and
    compile, and the outputs are the cold ones."""
    cache = tmp_path / "cache"
    cache.mkdir()
    result = run_sample(runtime_python, cache, env=misbehaving("inductor-config"))
    # the compiled inference graph misses and compiles (its kernels' code is the shipped one's)
    assert result["precompiled"] and result["aot_autograd"].get("autograd_cache_miss", 0) >= 1, result
    assert result["loss"] == pytest.approx(cold_result["loss"], rel=1e-6)
    assert result["logits_sum"] == pytest.approx(cold_result["logits_sum"], rel=1e-5, abs=1e-5)


def test_verify_settings_torch_does_not_take_are_named(tmp_path):
    code = ("import torch\nfrom hatch_precompile.child.verify_child import apply_setting\n"
            "try:\n    apply_setting(torch, {'config': ['inductor', 'cpp.threads', '4']})\n"
            "except ValueError as exc:\n    print(exc)\n")
    proc = run([sys.executable, "-c", code], env=misbehaving("verify-setting"), cwd=tmp_path)
    assert "inductor.cpp.threads: torch " in proc.stdout and "did not take 4 (RuntimeError('misbehaving on purpose'))" in proc.stdout


def test_a_logger_that_takes_no_filter_leaves_the_records_as_torch_makes_them(tmp_path):
    code = ("import logging, torch\nfrom hatch_precompile.run.torch_internals import settings\n"
            "with settings.quiet_logger('precompile-logger', lambda record: False):\n    print('ran')\n")
    assert run([sys.executable, "-c", code], env=misbehaving("precompile-logger"), cwd=tmp_path).stdout.split()[-1] == "ran"


def test_an_aoti_compile_that_raises_fails_the_step_by_name(tmp_path):
    code = ("import torch\nfrom torch import nn\nimport hatch_precompile\n"
            "m = nn.Linear(4, 2).eval()\n"
            "with torch.no_grad():\n"
            "    try:\n        hatch_precompile.save_step('serve', lambda m, x: m(x), m, torch.randn(3, 4))\n"
            "    except hatch_precompile.StepCaptureError as exc:\n        print(exc)\n")
    proc = run([sys.executable, "-c", code], cwd=tmp_path,
               env={**misbehaving("aoti-compile"), "HATCH_PRECOMPILE_STEPS_DIR": str(tmp_path / "steps"),
                    "HATCH_PRECOMPILE_NO_STEPS": "0"})
    assert "step 'serve' (aotinductor route): torch " in proc.stdout
    assert "could not capture it: RuntimeError: misbehaving on purpose" in proc.stdout
    assert not (tmp_path / "steps").exists()


def test_a_torch_that_cannot_keep_small_tensors_out_of_the_code_ships_no_exported_step(tmp_path):
    code = ("import torch\nfrom torch import nn\nimport hatch_precompile\n"
            "m = nn.Linear(4, 3).eval()\n"
            "with torch.no_grad():\n    print(hatch_precompile.save_step('serve', lambda m, x: m(x), m, torch.randn(3, 4)))\n")
    proc = run([sys.executable, "-c", code], cwd=tmp_path,
               env={**misbehaving("keep-constants"), "HATCH_PRECOMPILE_STEPS_DIR": str(tmp_path / "steps"),
                    "HATCH_PRECOMPILE_NO_STEPS": "0"})
    assert "step 'serve' not captured: torch " in proc.stdout
    assert "Inductor cannot keep small tensors out of the code it generates" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "None" and not (tmp_path / "steps").exists()


@pytest.mark.parametrize("broken, says", [
    ("aoti-loader", "the AOTInductor loader refused the package: misbehaving on purpose"),
    ("pytree", "its calling convention cannot be read here: RuntimeError('misbehaving on purpose')"),
    ("module-internals", "argument 0's hooks or submodules cannot be read: RuntimeError('misbehaving on purpose')"),
])
def test_an_exported_step_whose_torch_internals_misbehave_runs_the_fallback(step_site, tmp_path, broken, says):
    code = ("import json, torch, step_pkg\nfrom step_pkg.model import classify\n"
            "m = step_pkg.make_model().eval(); x = step_pkg.make_batch(6)[0]\n"
            "with torch.no_grad():\n    got = step_pkg.classify_step(m, x)\n"
            "print(json.dumps([step_pkg.classify_step.route, step_pkg.classify_step.reason, "
            "(got - classify(m, x)).abs().max().item()]))")
    (tmp_path / "cache").mkdir()
    proc = run([sys.executable, "-c", code], cwd=tmp_path, env={
        **misbehaving(broken, step_site), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    route, reason, error = json.loads(proc.stdout.strip().splitlines()[-1])
    assert route == "fallback" and says in reason and error < 1e-6
