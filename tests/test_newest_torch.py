"""The newest torch that installs quickly here, end to end (the suite's own torch is 2.13.0).

Every supported torch is proven by scripts/torch_matrix.py (docs/torch-versions.md); CI runs
this one besides the default: the torch-first flow, the first step warm, outputs as cold; on a
CUDA build, that a changed Triton changes the key the speedups compute in the background.
``HATCH_PRECOMPILE_TEST_TORCH`` names another requirement; set it empty to skip.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import copy_project, make_venv, run, run_sample

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

REQUIREMENT = os.environ.get("HATCH_PRECOMPILE_TEST_TORCH", "torch==2.14.1")


@pytest.mark.skipif(not REQUIREMENT, reason="HATCH_PRECOMPILE_TEST_TORCH is empty")
def test_newest_torch_builds_installs_and_starts_warm(hp_dist):
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-newest-torch-") as tmp:  # 5 GB: not kept
        tmp_path = Path(tmp)
        python = make_venv(tmp_path / "venv")
        run([python, "-m", "pip", "install", "-q", REQUIREMENT])
        version = run([python, "-c", "import torch; print(torch.__version__)"]).stdout.strip().splitlines()[-1]
        links = " ".join([os.environ.get("PIP_FIND_LINKS", ""), str(hp_dist)]).strip()
        proc = run([python, "-m", "pip", "install", "-v", copy_project(tmp_path / "sample_pkg")],
                   env={"PIP_FIND_LINKS": links})
        assert f"precompile: building artifacts for torch {version} of the target environment" in proc.stdout
        results = {}
        for name, env in (("cold", {"PRECOMPILE": "0"}), ("warm", {})):
            (tmp_path / name).mkdir()
            results[name] = run_sample(python, tmp_path / name, env=env)
        cold, warm = results["cold"], results["warm"]
        assert warm["torch"] == version and warm["precompiled"], warm["precompile_reason"]
        assert warm["aot_autograd"]["autograd_cache_hit"] >= 2 and not warm["aot_autograd"].get("autograd_cache_miss")
        assert warm["kernels_compiled"] == 0 and cold["kernels_compiled"] > 0
        assert warm["loss"] == cold["loss"] and warm["logits_sum"] == cold["logits_sum"]
        if run([python, "-c", "import triton"], check=False).returncode == 0:  # a CUDA build's Triton
            assert_changed_triton_changes_the_key(python, tmp_path, cold)
        shutil.rmtree(tmp_path / "venv")


# Triton's key as torch reads it after load() started computing it in the background, whether
# that background computation is what answered, and whether torch puts it into this machine's graph
# keys (a CUDA build on a machine without a GPU leaves it out before torch 2.15: CPU kernels are C++).
TRITON_KEY = """
import json, torch.utils._functools as functools_
import sample_pkg
from torch._inductor import codecache
executor = getattr(functools_, "_prefetch_executor", None)
started = bool(getattr(executor, "_threads", ())) if executor is not None else None
key = codecache.triton_key()
system = codecache.CacheBase.get_system()
print(json.dumps({"key": key, "prefetch_started": started,
                  "in_graph_keys": (system.get("version") or {}).get("triton") == key}))
"""


def assert_changed_triton_changes_the_key(python: Path, tmp_path: Path, cold: dict) -> None:
    """The speedup hashes Triton's sources in the background, in every process, and stores
    nothing: a changed Triton changes the key. Where torch keys graphs on it, the shipped graphs
    (keyed by the build's Triton) then miss and compile; where it does not, they hit; the outputs
    are the cold ones either way."""
    def key(**env) -> dict:
        return json.loads(run([python, "-c", TRITON_KEY], env=env).stdout.strip().splitlines()[-1])

    before, before_unpatched = key(), key(HATCH_PRECOMPILE_NO_PATCHES="1")
    assert before["key"] and before["key"] == before_unpatched["key"]
    # The executor is torch's, but torch itself never prefetches: a started one is load()'s doing.
    # None: a torch without it (before 2.13 the speedups use a thread of their own).
    assert before["prefetch_started"] in (True, None) and before_unpatched["prefetch_started"] in (False, None)
    assert (before["prefetch_started"] is None) == (before_unpatched["prefetch_started"] is None)
    triton = Path(run([python, "-c", "import triton, os; print(os.path.dirname(triton.__file__))"]).stdout.split()[-1])
    with (triton / "language" / "core.py").open("a") as source:  # this venv's own Triton: deleted after
        source.write("\n# changed after the wheel was built\n")
    after, after_unpatched = key(), key(HATCH_PRECOMPILE_NO_PATCHES="1")
    assert after["key"] != before["key"] and after["key"] == after_unpatched["key"]
    (tmp_path / "changed-triton").mkdir()
    changed = run_sample(python, tmp_path / "changed-triton")
    if after["in_graph_keys"]:
        assert changed["aot_autograd"].get("autograd_cache_miss") and changed["kernels_compiled"] > 0
    else:
        assert not changed["aot_autograd"].get("autograd_cache_miss") and changed["kernels_compiled"] == 0
    assert changed["loss"] == cold["loss"] and changed["logits_sum"] == cold["logits_sum"]
