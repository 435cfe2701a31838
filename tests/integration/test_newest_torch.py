"""The newest torch that installs quickly here, end to end (the suite's own torch is 2.13.0).

Every supported torch is proven by scripts/torch_matrix.py (docs/reference/torch-versions.md); CI runs
this one besides the default: the torch-first flow, the first step warm, the compiled functions served
untraced, outputs as cold, and never wrong where a check sends a call to tracing; on a CUDA build, that a changed Triton changes its key, and that Triton is
hashed only where graphs are keyed on it. Its steps (save_step(), bake) are test_newest_torch_steps.py's,
a module of its own so that the two halves run on two workers at once.
``HATCH_PRECOMPILE_TEST_TORCH`` names another requirement; set it empty to skip.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import copy_project, own_copy, run, run_sample, venv_with_torch

from integration.test_install_flow import find_links
from integration.test_runtime import NOTES, PREDICT
from integration.test_served_situations import BUILT, SITUATIONS, assert_served_as_cold

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

REQUIREMENT = os.environ.get("HATCH_PRECOMPILE_TEST_TORCH", "torch==2.14.1")


@pytest.mark.skipif(not REQUIREMENT, reason="HATCH_PRECOMPILE_TEST_TORCH is empty")
def test_newest_torch_builds_installs_and_starts_warm(hp_dist):
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-newest-torch-") as tmp:  # 5 GB: not kept
        tmp_path = Path(tmp)
        python, version = venv_with_torch(tmp_path / "venv", REQUIREMENT)
        links = find_links(hp_dist)["PIP_FIND_LINKS"]
        # The steps on this torch are test_newest_torch_steps.py's: here the sample trains through its
        # compiled fallback, which the second pass serves as it serves the inference.
        proc = run([python, "-m", "pip", "install", "-v", copy_project(tmp_path / "sample_pkg")],
                   env={"PIP_FIND_LINKS": links, "HATCH_PRECOMPILE_NO_DYNAMO_CACHE": "0"})
        assert f"precompile: building artifacts for torch {version} of the target environment" in proc.stdout
        results = {}
        for name, env in (("cold", {"PRECOMPILE": "0"}), ("warm", {})):
            (tmp_path / name).mkdir()
            results[name] = run_sample(python, tmp_path / name, env=env)
        cold, warm = results["cold"], results["warm"]
        assert warm["torch"] == version and warm["precompiled"], warm["precompile_reason"]
        # The compiled inference served untraced from its Dynamo cache entry, as on the suite's torch.
        assert warm["first_predict_phases"]["frames"] == 0, warm["served"]
        assert warm["served"]["sample_pkg.model.ConvNet.forward"].startswith("served: 1 guarded code(s)"), warm["served"]
        assert not warm["aot_autograd"].get("autograd_cache_miss")
        assert warm["kernels_compiled"] == 0 and cold["kernels_compiled"] > 0
        # The shipped kernels read the thread count when they run (built for any thread count); a
        # reduction split another way can round the last bits otherwise than the cold compile's
        # kernels with the count built in (seen on an AMD EPYC with 2.14.1: 1.3e-8 of the logits'
        # sum; bit for bit against a cold run with TORCHINDUCTOR_CPP_DYNAMIC_THREADS=1).
        assert warm["loss"] == pytest.approx(cold["loss"], rel=1e-6)
        assert warm["logits_sum"] == pytest.approx(cold["logits_sum"], rel=1e-6)
        assert_notes_only_what_this_torchs_keys_hold(python, tmp_path)
        if run([python, "-c", "import triton"], check=False).returncode == 0:  # a CUDA build's Triton
            assert_changed_triton_changes_the_key(python, tmp_path, cold)
        assert_never_wrong_when_served(python, tmp_path, links)
        shutil.rmtree(tmp_path / "venv")


def assert_never_wrong_when_served(python: Path, tmp_path: Path, links: str) -> None:
    """tests/situations_pkg built on this torch serves every compiled function (on 2.14.1, a graph with
    nothing to compute once failed the whole second pass), and the situations a check sends to tracing,
    and those of torch's compile controls and worker threads, compute what a cold compile does
    (test_served_situations.py runs them all on the suite's torch)."""
    proc = run([python, "-m", "pip", "install", "-v", copy_project(tmp_path / "situations_pkg", SITUATIONS)],
               env={"PIP_FIND_LINKS": links, "HATCH_PRECOMPILE_NO_DYNAMO_CACHE": "0"})
    assert BUILT in proc.stdout, proc.stdout[-3000:]
    script = Path(shutil.copy(SITUATIONS / "situations.py", tmp_path / "situations.py"))  # not beside the source
    for group in ("environment", "after_import", "hooks", "controls", "threads"):
        assert_served_as_cold(python, script, tmp_path / "situations" / group, group, tmp_path / "situations-cold")


def assert_notes_only_what_this_torchs_keys_hold(python: Path, tmp_path: Path) -> None:
    """As test_runtime's on the suite's torch, read from this torch's own config: no note for
    TORCHINDUCTOR_COMPILE_THREADS=1 and the shipped graphs hit; a note for TORCHINDUCTOR_MAX_AUTOTUNE=1
    (whose miss, a max-autotune compile, is left to the suite's torch)."""
    for variable, noted in (("TORCHINDUCTOR_COMPILE_THREADS", False), ("TORCHINDUCTOR_MAX_AUTOTUNE", True)):
        (tmp_path / variable).mkdir()
        env = {variable: "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / variable)}
        if noted:
            notes = json.loads(run([python, "-c", NOTES], env=env, cwd=tmp_path).stdout.strip().splitlines()[-1])
            assert len(notes) == 1 and notes[0].startswith(f"{variable}=1 here and the graphs were compiled with it unset")
            continue
        proc = run([python, "-c", PREDICT], env=env, cwd=tmp_path)
        notes, hits, misses, traced, served = json.loads(proc.stdout.strip().splitlines()[-1])
        assert notes == [] and misses == 0 and (traced == 0 or hits >= 1), served


# After a warm step: whether Triton's key had been computed or started (torch 2.13+ keeps it in a
# prefetchable cache; None: another shape), then Triton's key as torch reads it, torch's system
# answer, and whether torch puts the key into this machine's graph keys (a CUDA build on a machine
# without a GPU leaves it out before torch 2.15: CPU kernels are C++).
TRITON_KEY = """
import inspect, json, torch.utils._functools as functools_
import sample_pkg
trainer = sample_pkg.Trainer(sample_pkg.make_model())
trainer.predict(sample_pkg.make_batch()[0])  # compiled
from torch._inductor import codecache
state = inspect.getclosurevars(codecache.triton_key).nonlocals
sentinel = getattr(functools_, "_cache_sentinel", None)
hashed = (state["_cache"] is not sentinel or state["_future"] is not None) if {"_cache", "_future"} <= set(state) else None
key = codecache.triton_key()
system = codecache.CacheBase.get_system()
print(json.dumps({"key": key, "hashed_by_the_step": hashed, "system": system,
                  "in_graph_keys": (system.get("version") or {}).get("triton") == key}))
"""


# Triton's key where torch keys graphs on it (torch 2.15, or a GPU), through the memo the speedups
# use there: whether Triton's own key function ran (in any thread), and the key torch then holds.
MEMO_KEY = """
import json, sys, threading
seen = []
def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "triton_key" and "/triton/" in frame.f_code.co_filename:
        seen.append(1)
sys.setprofile(profile); threading.setprofile(profile)
from hatch_precompile.run.caches import warm_shortcuts
from hatch_precompile.run.torch_internals.caches import prefetch
prefetch.prefetch("triton-key", memo=warm_shortcuts.TritonKeyMemo())
from torch._inductor import codecache
key = codecache.triton_key()
sys.setprofile(None); threading.setprofile(None)
print(json.dumps({"key": key, "hashed": bool(seen)}))
"""


def assert_changed_triton_changes_the_key(python: Path, tmp_path: Path, cold: dict) -> None:
    """The speedups hash Triton's sources in the background, or not at all where torch leaves
    them out of the graphs' keys; where it keys on them, a remembered key is used only while
    every file of Triton is unchanged: a changed Triton changes the key. Where torch keys graphs
    on it, the shipped graphs (keyed by the build's Triton) then miss and compile; where it does
    not, they hit; the outputs are the cold ones either way."""
    def key(**env) -> dict:
        return json.loads(run([python, "-c", TRITON_KEY], env=env).stdout.strip().splitlines()[-1])

    def remembered() -> dict:
        env = {"XDG_CACHE_HOME": str(tmp_path / "user-cache")}
        return json.loads(run([python, "-c", MEMO_KEY], env=env).stdout.strip().splitlines()[-1])

    # This venv's own Triton: the memo's fingerprint reads each file's ctime, which uv changes in
    # every venv linked to its cache when it links another (test_newest_torch_steps.py's, at once).
    triton = own_copy(Path(run([python, "-c", "import triton, os; print(os.path.dirname(triton.__file__))"]).stdout.split()[-1]))
    before, before_unpatched = key(), key(HATCH_PRECOMPILE_NO_PATCHES="1")
    first, second = remembered(), remembered()
    assert first["hashed"] and not second["hashed"] and first["key"] == second["key"] == before_unpatched["key"]
    assert before["key"] and before["key"] == before_unpatched["key"]
    # Torch's own answer, whether load() answered it without Triton's key or torch computed it.
    assert before["system"] == before_unpatched["system"] and before["in_graph_keys"] == before_unpatched["in_graph_keys"]
    # Torch hashes Triton for its first step; the speedups do too (in the background) where the
    # graphs are keyed on it, and not at all where they are not.
    assert before_unpatched["hashed_by_the_step"] in (True, None)
    assert before["hashed_by_the_step"] in ((True, None) if before["in_graph_keys"] else (False, None))
    with (triton / "language" / "core.py").open("a") as source:
        source.write("\n# changed after the wheel was built\n")
    after, after_unpatched = key(), key(HATCH_PRECOMPILE_NO_PATCHES="1")
    assert after["key"] != before["key"] and after["key"] == after_unpatched["key"]
    assert after["system"] == after_unpatched["system"]
    changed_memo = remembered()
    assert changed_memo["hashed"] and changed_memo["key"] == after_unpatched["key"]
    (tmp_path / "changed-triton").mkdir()
    changed = run_sample(python, tmp_path / "changed-triton")
    if after["in_graph_keys"]:
        assert changed["aot_autograd"].get("autograd_cache_miss") and changed["kernels_compiled"] > 0
    else:
        assert not changed["aot_autograd"].get("autograd_cache_miss") and changed["kernels_compiled"] == 0
    assert changed["loss"] == pytest.approx(cold["loss"], rel=1e-6)  # to the last bits: see the warm start's
    assert changed["logits_sum"] == pytest.approx(cold["logits_sum"], rel=1e-6)
