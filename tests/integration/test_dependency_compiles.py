"""The compiles a package's dependencies make on its behalf, served untraced and never wrong:
tests/deps_pkg calls transformers' generate() with a static cache (which compiles the model's
``__call__`` inside, ``PreTrainedModel.get_compiled_call``) and transformers' own ``@torch.compile``
function (bitnet's ``unpack_weights``, compiled at its module's import). Each group of situations
runs in a fresh process served and in one compiled cold, and every output must be the cold
compile's: what the package's code runs is served where the build's trace holds, and the same
library compile made for anyone else (the user's own generate, the user's own call) is traced."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run

from integration.test_served_compiles import GRAPH_LOADS_COUNTED, built_with_both_passes
from integration.test_served_situations import EITHER, SERVED, TRACED, assert_served_as_cold

pytestmark = pytest.mark.slow  # builds a wheel, runs torch in fresh processes

DEPS = ROOT / "tests" / "deps_pkg"
GENERATE = ("torch.nn.modules.module.Module._wrapped_call_impl, compiled by "
            "transformers.modeling_utils.PreTrainedModel.get_compiled_call")
UNPACK = "transformers.integrations.bitnet.unpack_weights, compiled by transformers.integrations.bitnet.<module>"

ROTARY_REPLACED = "the library's rotary function replaced by the user's, wrapped as the library wraps it"
EXPECTED = {
    "generate": {
        "the package's generate, as its build ran it": SERVED,
        # transformers 5.25's Llama calls it as an object of a class made inside a function (`kernels`'
        # Func), which the compiled code, a cold compile's too, finds at that global each time it runs
        ROTARY_REPLACED: SERVED,
        # transformers' same call, made outside the package: its compiled call is traced
        "the user's own generate on their own model, outside the package": TRACED,
        "a second model in the same process, other weights": SERVED,
        "sampling with a seed": SERVED,
        "the model's generation config changed: no cache (nothing compiles)": SERVED,
        "another max_new_tokens": TRACED,
        "another prompt length and batch": TRACED,
        "the model's config changed: another attention implementation": TRACED,
        "another dtype": TRACED,
        "a model the user builds with another config": TRACED,
        "the package's generate again, after all of these": SERVED,
        # the package's call with other options is torch's: a code it compiled for the user's call
        # above may serve it (served() says so, below)
        "the compile config changed: fullgraph": EITHER,
        "the compile config changed: another mode": EITHER,
    },
    "unpacking": {
        "the package unpacking weights, as its build did": SERVED,
        "other weights of the same shape": SERVED,
        "from a worker thread the package runs": SERVED,
        "another shape": TRACED,
        "the library's function called by the user, outside the package": TRACED,
    },
}


@pytest.fixture(scope="session")
def deps_site(tmp_path_factory) -> Path:
    """tests/deps_pkg built (both passes) and unpacked under ``site/``, its output in ``build.log``."""
    return built_with_both_passes(tmp_path_factory, DEPS, DEPS / "situations.py")


@pytest.fixture(scope="module")
def cold_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("deps-cold") / "cache"


def test_the_build_records_and_serves_the_compiles_its_dependencies_make(deps_site):
    log = (deps_site / "build.log").read_text()
    assert ("precompile: 2 compiled function(s) served without Dynamo tracing them (2 guarded code(s), 2 compiled by "
            "its dependencies)") in log, log
    assert f"precompile: served 2 of 2 compiled function(s) untraced (2 compiled by its dependencies: {GENERATE}" in log
    assert "PicklingError" not in log and "not served untraced" not in log, log
    precompiled = deps_site / "site" / "deps_pkg" / "_precompiled"
    manifest = json.loads(next((precompiled / "sets").glob("*/manifest.json")).read_text())
    index = json.loads((precompiled / "blobs" / manifest["files"]["dynamo/served.json"]["sha256"]).read_bytes())
    made_by = {f["qualname"]: (f["made_by"]["module"], f["made_by"]["function"]) for f in index["functions"].values()}
    assert made_by == {"Module._wrapped_call_impl": ("transformers.modeling_utils", "PreTrainedModel.get_compiled_call"),
                       "unpack_weights": ("transformers.integrations.bitnet", "<module>")}
    assert manifest["served"]["served"] == 2 and len(manifest["served"]["by_dependencies"]) == 2
    (wheel,) = (deps_site / "dist").glob("*.whl")
    report = run([sys.executable, "-m", "hatch_precompile", "report", wheel]).stdout
    assert f"compiled by a dependency: {GENERATE}" in report and f"compiled by a dependency: {UNPACK}" in report


@pytest.mark.parametrize("group", list(EXPECTED))
def test_each_situation_computes_what_a_cold_compile_computes(deps_site, cold_cache, tmp_path, group):
    served = assert_served_as_cold(Path(sys.executable), deps_site / "situations.py", tmp_path, group, cold_cache,
                                   site=deps_site / "site", expected=EXPECTED, said={group: {}}, package="")
    name = GENERATE if group == "generate" else UNPACK
    (outcome,) = [said for key, said in served["served"].items() if key.startswith(name)]
    if group == "generate":  # the last situation's: another compile config
        assert outcome == "traced: compiled with other options than the build's", outcome
        results = served["results"]  # the user's rotary really computes otherwise: a served old code would show
        assert results[ROTARY_REPLACED][1] != results["the package's generate, as its build ran it"][1]
    if group == "unpacking":
        assert outcome.startswith("served: 1 guarded code(s)"), outcome
        assert all(served["kernels"][n] == 0 for n, how in EXPECTED[group].items() if how == SERVED), served["kernels"]


def test_status_lists_each_installed_package_that_ships_artifacts_and_what_it_serves(deps_site):
    """``status`` finds the package without importing it: its set valid here, and the compiled functions
    it serves (here both compiled by its dependencies); where no set fits, why not."""
    env = {"PYTHONPATH": str(deps_site / "site")}
    found = json.loads(run([sys.executable, "-m", "hatch_precompile", "status", "--json"], env=env).stdout)
    (deps,) = [p for p in found["installed"] if p["package"] == "deps_pkg"]
    assert deps["distribution"] == "deps-pkg" and deps["sets"] == 1 and deps["loading"] is True
    assert deps["valid_set"] and deps["why_not"] is None and deps["served"] == {"own": 0, "by_dependencies": 2}
    said = run([sys.executable, "-m", "hatch_precompile", "status"], env={**env, "PRECOMPILE_DEPS_PKG": "0"}).stdout
    assert ("serves 2 compiled function(s) untraced (0 its own, 2 compiled by its dependencies); loading off "
            "(PRECOMPILE_DEPS_PKG=0)") in said, said
    elsewhere = run([sys.executable, "-m", "hatch_precompile", "status"], env={**env, "ATEN_CPU_CAPABILITY": "default"})
    assert "deps_pkg 0.1.0" in elsewhere.stdout and "none valid here: built for cpu_capability=" in elsewhere.stdout, \
        elsewhere.stdout


AHEAD = GRAPH_LOADS_COUNTED + r"""
from hatch_precompile.run.sets.artifacts import ArtifactSet
from hatch_precompile.run.torch_internals.served import entry_pickle
from torch._dynamo import package
reads = []  # what the first generate's install would read again: a shipped file, an entry, a guard state
def counting(owner, name, kind):
    real = getattr(owner, name)
    def call(*args, **kwargs):
        reads.append(kind)
        return real(*args, **kwargs)
    setattr(owner, name, call)
counting(ArtifactSet, "read", "file")
counting(entry_pickle, "loads", "entry")
counting(package, "load_guards_state", "guard state")
from deps_pkg import llm
from torch._dynamo.utils import get_compilation_metrics
from hatch_precompile.run.served import served_compile
model = llm.make_model()
before, read_before = len(loaded), len(reads)
out = llm.generate(model, llm.prompt()).tolist()
print(json.dumps({"before": before, "after": len(loaded), "out": out, "served": served_compile.served(),
                  "read ahead": read_before, "read at the call": reads[read_before:],
                  "traced": sum(1 for m in get_compilation_metrics() if m.co_name)}))
"""


def test_a_compile_generate_makes_finds_its_graphs_loaded_before_the_first_generate(deps_site, tmp_path):
    """transformers compiles the model's call inside generate(), so its install is part of the first
    generate; the graphs of that entry are loaded once Dynamo is imported (as transformers' model is
    made) with the entry, its files (hash-checked) and its guard states, and the first generate only
    installs the guards: it reads no shipped file and unpickles no entry."""
    proc = run([sys.executable, "-c", AHEAD], cwd=tmp_path,
               env={"PYTHONPATH": str(deps_site / "site"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    (outcome,) = [said for key, said in found["served"].items() if key.startswith(GENERATE)]
    assert outcome.startswith("served: 1 guarded code(s)"), found["served"]
    assert found["before"] >= 1 and found["after"] == found["before"] and found["traced"] == 0, found
    # (a guard state that names a module not imported yet is read at the install: unpickling it
    # ahead would import that module)
    assert found["read ahead"] >= 3 and not {"file", "entry"} & set(found["read at the call"]), found
