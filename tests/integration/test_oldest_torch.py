"""The oldest torch the README supports, end to end: a precompiled package's first compile in a fresh process.

The newest torch's twin (test_newest_torch.py), kept to what issue 49 found broken: on torch 2.7.1
the first compile of a process that had loaded a precompiled package raised "No toplevel event
active" in about half the processes (the key prefetch that compile starts raced Dynamo for its
event logger). Here the sample is built for that torch through pip (the torch-first flow) and
installed; then fresh processes, each with an empty cache dir and ``HOME``, import it and make
their first compiled calls: one trains first, one infers first. Each raises nothing, is warm
(AOTAutograd hits, no kernel compiled) and computes what eager does. A race need not crash every
run (by hand, 3 in 4 processes that trained first crashed; in this test, on the old code, none of
six did): so each process also says which threads of ours started before Dynamo had made its
event logger, and none may.
``HATCH_PRECOMPILE_TEST_OLDEST_TORCH`` names another requirement; set it empty to skip.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from conftest import copy_project, run, run_fresh, venv_with_torch

from integration.test_install_flow import find_links

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes

REQUIREMENT = os.environ.get("HATCH_PRECOMPILE_TEST_OLDEST_TORCH", "torch==2.7.1")

# A fresh process's first compiled calls, in the order argv[1] names; a model each, so that
# either order computes the same. The weights after the step show its gradients. Torch makes
# Dynamo's event logger at its first use, without a lock: a thread of ours started before it
# exists (a key prefetch, before 2.13) may make a second one and lose the compile's open event.
FIRST_CALLS = """
import json, pathlib, sys, threading
import torch
from torch._dynamo import utils
from torch._dynamo.utils import counters
from torch._inductor.runtime.cache_dir_utils import cache_dir
import sample_pkg
def kernels():
    return sum(1 for _ in pathlib.Path(cache_dir()).rglob("*.so"))
before = kernels()
images, labels = sample_pkg.make_batch()
trainer, server = sample_pkg.Trainer(sample_pkg.make_model()), sample_pkg.Trainer(sample_pkg.make_model())
out, early, start = {}, [], threading.Thread.start
def noting(thread):
    if thread.name.startswith("hatch-precompile") and getattr(utils, "CHROMIUM_EVENT_LOG", True) is None:
        early.append(thread.name)
    start(thread)
threading.Thread.start = noting
def training():
    out["loss"] = trainer.step(images, labels).item()
    out["weights_sum"] = sum(p.double().sum().item() for p in trainer.model.parameters())
def inference():
    out["logits_sum"] = server.predict(images).double().sum().item()
for call in (training, inference) if sys.argv[1] == "training" else (inference, training):
    call()
status = sample_pkg.precompile_status
print(json.dumps({**out, "threads_before_event_logger": early, "torch": torch.__version__,
                  "precompiled": status.loaded, "reason": status.reason,
                  "aot_autograd": dict(counters["aot_autograd"]), "kernels_compiled": kernels() - before}))
"""


def first_calls(python: Path, where: Path, first: str, **env: str) -> dict:
    """FIRST_CALLS in a fresh process as a new user's: an empty cache dir, ``HOME`` and user cache."""
    home = where / "home"
    home.mkdir(parents=True)
    return run_fresh(python, ["-c", FIRST_CALLS, first], where / "cache",
                     env={"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), **env})


@pytest.mark.skipif(not REQUIREMENT, reason="HATCH_PRECOMPILE_TEST_OLDEST_TORCH is empty")
def test_oldest_torch_first_compile_in_a_fresh_process_is_warm_and_raises_nothing(hp_dist):
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-oldest-torch-") as tmp:  # 5 GB: not kept
        tmp_path = Path(tmp)
        python, version = venv_with_torch(tmp_path / "venv", REQUIREMENT)
        links = find_links(hp_dist)["PIP_FIND_LINKS"]
        proc = run([python, "-m", "pip", "install", "-v", copy_project(tmp_path / "sample_pkg")],
                   env={"PIP_FIND_LINKS": links, "HATCH_PRECOMPILE_NO_DYNAMO_CACHE": "0"})
        assert f"precompile: building artifacts for torch {version} of the target environment" in proc.stdout
        # A torch without precompile entries on code objects: no second pass, today's route unchanged.
        assert "second pass" not in proc.stdout and "served without Dynamo tracing" not in proc.stdout
        eager = first_calls(python, tmp_path / "eager", "training", TORCH_COMPILE_DISABLE="1", PRECOMPILE="0")
        assert eager["aot_autograd"] == {} and not eager["precompiled"]
        for first in ("training", "inference"):
            warm = first_calls(python, tmp_path / first, first)  # raises: run() fails the test with its output
            assert warm["torch"] == version and warm["precompiled"], warm["reason"]
            assert warm["threads_before_event_logger"] == [], first
            assert warm["aot_autograd"].get("autograd_cache_hit", 0) >= 2 and not warm["aot_autograd"].get(
                "autograd_cache_miss"), warm["aot_autograd"]
            assert warm["kernels_compiled"] == 0
            for value in ("loss", "weights_sum", "logits_sum"):
                assert warm[value] == pytest.approx(eager[value], rel=1e-5), (first, value)
