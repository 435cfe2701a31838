"""The newest torch that installs quickly here, end to end (the suite's own torch is 2.13.0).

Every supported torch is proven by scripts/torch_matrix.py (docs/torch-versions.md); CI runs
this one besides the default: the torch-first flow, the first step warm, outputs as cold.
``HATCH_PRECOMPILE_TEST_TORCH`` names another requirement; set it empty to skip.
"""

from __future__ import annotations

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
        shutil.rmtree(tmp_path / "venv")
