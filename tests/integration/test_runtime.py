"""Installing the precompiled wheel elsewhere and starting warm; skipping safely when unusable."""

from __future__ import annotations

import json
import math

import pytest
from conftest import run, run_sample, unpack

pytestmark = pytest.mark.slow  # builds wheels or venvs, or runs torch in fresh processes


def so_files(cache):
    return sorted(p.relative_to(cache) for p in cache.rglob("*.so"))


def test_warm_start_hits_every_cache_and_compiles_no_kernel(runtime_python, cold_result, tmp_path):
    cache, temp = tmp_path / "cache", tmp_path / "temp"
    cache.mkdir()
    temp.mkdir()
    warm = run_sample(runtime_python, cache, env={"TMPDIR": str(temp)})
    assert warm["precompiled"], warm["precompile_reason"]
    # The C++ loader extracted each shipped step's package under the temp dir: gone at exit.
    assert warm["classify_route"] == "aotinductor" and not list(temp.iterdir())
    assert warm["aot_autograd"].get("autograd_cache_miss", 0) == 0
    # The compiled inference is served untraced from its shipped Dynamo cache entry (no AOTAutograd
    # lookup: the entry holds its graphs); the training step is exported.
    assert warm["first_predict_phases"]["frames"] == 0, warm["served"]
    assert warm["served"]["sample_pkg.model.ConvNet.forward"].startswith("served: 1 guarded code(s)"), warm["served"]
    assert warm["step_route"] == "aotinductor", warm["step_reason"]
    assert warm["inductor"].get("fxgraph_cache_miss", 0) == 0
    assert warm["kernels_compiled"] == 0
    # The shipped training step ran without Dynamo: no frame compiled (the torch matrix's tracing
    # column reads this split, which has frames where the step falls back).
    assert warm["first_step_phases"]["frames"] == 0

    assert not cold_result["precompiled"] and cold_result["precompile_reason"] == "disabled by PRECOMPILE=0"
    assert cold_result["aot_autograd"]["autograd_cache_miss"] >= 2
    assert cold_result["kernels_compiled"] > 0
    # Same numbers as a cold compile: the shipped kernels are the kernels a cold compile builds.
    assert math.isclose(warm["loss"], cold_result["loss"], rel_tol=1e-6)
    assert math.isclose(warm["logits_sum"], cold_result["logits_sum"], rel_tol=1e-6, abs_tol=1e-5)


# A package that calls torch.compile at import, in a process that never calls it (a CLI's --help):
# what the process spawned, the threads hatch-precompile left, and what it registered to run at
# exit; then one call, after which the compiler's --version has been asked.
COMPILE_NEVER_CALLED = """
import atexit, json, sys, threading
spawned, at_exit = [], []
sys.addaudithook(lambda event, args: spawned.append(" ".join(map(str, args[1] or ()))) if event == "subprocess.Popen" else None)
register = atexit.register
atexit.register = lambda fn, *a, **k: (at_exit.append(getattr(fn, "__module__", None) or ""), register(fn, *a, **k))[1]
import torch
import sample_pkg
compiled = torch.compile(sample_pkg.make_model())
import torch._dynamo.convert_frame, torch._inductor.codecache  # what a compile would import, imported
before = {"spawned": list(spawned), "at_exit": [m for m in at_exit if m.startswith("hatch_precompile")],
          "threads": [t.name for t in threading.enumerate() if t.name.startswith("hatch-precompile")]}
with torch.no_grad():
    compiled(sample_pkg.make_batch()[0])
print(json.dumps({"precompiled": bool(sample_pkg.precompile_status), "before": before, "after": spawned}))
"""


def test_a_process_that_never_compiles_starts_no_compiler_and_leaves_nothing_for_exit(runtime_python, tmp_path):
    """The patches that only a compile needs wait for Dynamo's first compile: until then no
    subprocess (the compiler's --version), no hashing thread (torch's key), no exit handler. The
    user's first process asks the compiler's --version then; the next one starts no compiler at all
    (the line is remembered, and answers Inductor's own asks too)."""
    (tmp_path / "cache").mkdir()
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "XDG_CACHE_HOME": str(tmp_path / "user-cache")}
    first, second = (json.loads(run([runtime_python, "-c", COMPILE_NEVER_CALLED], cwd=tmp_path, env=env)
                                .stdout.strip().splitlines()[-1]) for _ in range(2))
    for result in (first, second):
        assert result["precompiled"]
        assert result["before"] == {"spawned": [], "at_exit": [], "threads": []}
    assert any(command.endswith("--version") for command in first["after"]), first["after"]
    assert second["after"] == [], second["after"]


def test_a_process_under_ci_hits_with_torchs_ci_default_turned_back(runtime_python, tmp_path):
    """The wheel was built without CI=true (conftest); a test suite run under it misses from torch
    2.11 on (functorch's error_on_custom_op_aliasing is in the key) unless it sets the variable back."""
    code = "import torch._functorch.config as c; print(hasattr(c, 'error_on_custom_op_aliasing'))"
    reads_ci = run([runtime_python, "-c", code]).stdout.strip().splitlines()[-1] == "True"
    for name, env in (("plain", {"CI": "true"}),
                      ("set back", {"CI": "true", "TORCHINDUCTOR_ERROR_ON_CUSTOM_OP_ALIASING": "0"})):
        cache = tmp_path / name / "cache"
        cache.mkdir(parents=True)
        result = run_sample(runtime_python, cache, env=env)
        misses = result["aot_autograd"].get("autograd_cache_miss", 0)
        # the compiled inference graph misses; the exported training step reads no such key
        assert misses == (1 if reads_ci and name == "plain" else 0), (name, result)
        assert result["step_route"] == "aotinductor", result["step_reason"]


NOTES = "import json, sample_pkg; print(json.dumps(list(sample_pkg.precompile_status.notes)))"


@pytest.mark.parametrize("variable, in_key", [("TORCHINDUCTOR_COMPILE_THREADS", False),
                                              ("TORCHINDUCTOR_MAX_AUTOTUNE", True)])
def test_load_notes_a_variable_only_where_torchs_keys_hold_it(runtime_python, tmp_path, variable, in_key):
    """TORCHINDUCTOR_COMPILE_THREADS=1, common in containers and CI, sets an entry torch's keys leave
    out: no note, and the shipped graphs hit. TORCHINDUCTOR_MAX_AUTOTUNE=1 is in every key: noted,
    and the shipped inference graph misses, as said."""
    (tmp_path / "cache").mkdir()
    env = {variable: "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    proc = run([runtime_python, "-c", PREDICT], env=env, cwd=tmp_path)
    notes, hits, misses, traced, served = json.loads(proc.stdout.strip().splitlines()[-1])
    if in_key:
        assert notes == [f"{variable}=1 here and the graphs were compiled with it unset: torch's cache keys hold "
                         "the setting it makes, so every graph will compile again"]
        # Its Dynamo cache entry is not installed either: no guard checks the compiler's settings.
        assert served["sample_pkg.model.ConvNet.forward"] == ("traced: torch._inductor.config.max_autotune is True "
                                                              "here, False when the build compiled")
        assert misses >= 1
    else:
        assert notes == [] and "PrecompileWarning" not in proc.stdout
        assert traced == 0 and misses == 0, served  # served untraced from its entry


# The notes load() gave at import, then the sample's shipped inference graph (no_grad, batch 32):
# its AOTAutograd hits and misses.
PREDICT = """
import json, hatch_precompile, sample_pkg
from torch._dynamo.utils import counters, get_compilation_metrics
notes = list(sample_pkg.precompile_status.notes)
sample_pkg.Trainer(sample_pkg.make_model()).predict(sample_pkg.make_batch()[0])
aot = counters["aot_autograd"]
print(json.dumps([notes, aot.get("autograd_cache_hit", 0), aot.get("autograd_cache_miss", 0),
                  sum(1 for m in get_compilation_metrics() if m.co_name), hatch_precompile.served()]))
"""


def test_load_never_clobbers_a_whole_entry_and_replaces_one_cut_short(runtime_python, tmp_path):
    """The second process finds every entry there: one of the right size stays as it is (another
    process was first), one a power loss cut to 0 bytes is replaced whole (before, it counted as
    present and the first compile failed: `ImportError: ... file too short`)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    code = "import json, sample_pkg; s = sample_pkg.precompile_status; print(json.dumps([s.installed, s.present]))"
    env = {"TORCHINDUCTOR_CACHE_DIR": str(cache)}
    first = json.loads(run([runtime_python, "-c", code], env=env).stdout.splitlines()[-1])
    assert first[0] > 0 and first[1] == 0
    kept, cut = sorted(cache.rglob("*.main.so"))[:2]
    other = bytes(len(kept.read_bytes()))  # another entry of the same size
    kept.write_bytes(other)
    whole = cut.read_bytes()
    cut.write_bytes(b"")
    second = json.loads(run([runtime_python, "-c", code], env=env).stdout.splitlines()[-1])
    assert second == [1, first[0] - 1]
    assert kept.read_bytes() == other and cut.read_bytes() == whole
    assert not list(cache.rglob("*.tmp"))


def test_shipped_torchscript_module_loads_and_matches_eager(runtime_python, tmp_path):
    code = (
        "import torch, sample_pkg\n"
        "m = sample_pkg.scripted_classifier()\n"
        "assert isinstance(m, torch.jit.ScriptModule), type(m)\n"
        "x = sample_pkg.make_batch()[0]\n"
        "torch.testing.assert_close(m(x), sample_pkg.make_model().eval()(x))\n"
        "import hatch_precompile\n"
        "assert hatch_precompile.load_torchscript('sample_pkg', 'missing') is None\n"
        "print('ok')\n"
    )
    proc = run([runtime_python, "-W", "always", "-c", code], env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    assert proc.stdout.splitlines()[-1] == "ok"
    assert "no TorchScript module named 'missing' was shipped" in proc.stdout


def test_warm_start_builds_no_precompiled_header(runtime_python, cold_result, tmp_path):
    """Inductor's prefix header is built per environment into a machine-global dir (under the
    temp dir) before it checks for a built kernel; with every kernel shipped it is not needed."""
    results = {}
    for name, env in [("fast", {}), ("unpatched", {"HATCH_PRECOMPILE_NO_SPEEDUPS": "1"})]:
        tmp = tmp_path / name
        (tmp / "cache").mkdir(parents=True)
        results[name] = run_sample(runtime_python, tmp / "cache", env={"TMPDIR": str(tmp), **env})
        headers = list(tmp.glob("torchinductor_*/precompiled_headers/*.gch"))
        assert results[name]["precompiled"] and results[name]["kernels_compiled"] == 0
        assert bool(headers) == (name == "unpatched"), headers
    assert results["fast"]["loss"] == results["unpatched"]["loss"] == cold_result["loss"]


COUNT_PROBES = """
import json, runpy, sys
probes = []
def audit(event, args):
    if event == "subprocess.Popen" and args[0] == sys.executable:
        probes.append(args[1])
sys.addaudithook(audit)
sys.argv = ["sample_pkg", "--json"]
runpy.run_module("sample_pkg", run_name="__main__")
print(json.dumps(len(probes)))
"""


def probe_counts(python, tmp_path, pythonpath=None) -> list[int]:
    """ISA probe children of two fresh processes that share a user cache (empty at first: a new machine)."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), **({"PYTHONPATH": str(pythonpath)} if pythonpath else {})}
    counts = []
    for name in ("first", "second"):
        cache = tmp_path / name
        cache.mkdir()
        proc = run([python, "-c", COUNT_PROBES], env={**env, "TORCHINDUCTOR_CACHE_DIR": str(cache)})
        lines = proc.stdout.strip().splitlines()
        assert json.loads(lines[-2])["kernels_compiled"] == 0
        counts.append(json.loads(lines[-1]))
    return counts


def test_a_new_machine_runs_no_isa_probe_the_shipped_set_vouches_for(runtime_python, tmp_path):
    """Inductor compiles and dlopens an ISA probe library in a child Python per candidate ISA. The
    set's build passed those probes, and this CPU has their features: none runs, not even in the
    first process of an empty home (a fresh container)."""
    assert probe_counts(runtime_python, tmp_path) == [0, 0]
    assert not (tmp_path / "xdg" / "hatch-precompile" / ".isa-probes").exists()


def test_isa_probes_no_set_vouches_for_run_once_per_machine(runtime_python, precompiled_wheel, tmp_path):
    """A set that recorded no probes (an older build): a successful probe of the same library on the
    same machine is remembered in the user cache."""
    site = unpack(precompiled_wheel[0], tmp_path / "site")
    (manifest,) = (site / "sample_pkg" / "_precompiled" / "sets").glob("*/manifest.json")
    data = json.loads(manifest.read_text())
    data["probes"] = {}
    manifest.write_text(json.dumps(data))
    counts = probe_counts(runtime_python, tmp_path, pythonpath=site)
    assert counts[0] > 0, "the first process on this machine probes"
    assert counts[1] == 0, "the second does not"
    assert len(list((tmp_path / "xdg" / "hatch-precompile" / ".isa-probes").iterdir())) == counts[0]


CHANGED_AFTER_LOAD = """
import json, os, sys
from pathlib import Path
import sample_pkg  # load() installs into the TORCHINDUCTOR_CACHE_DIR of the environment
os.environ["TORCHINDUCTOR_CACHE_DIR"] = sys.argv[1]  # then the program moves it, before compiling
sample_pkg.Trainer(sample_pkg.make_model()).predict(sample_pkg.make_batch()[0])  # compiled
from torch._dynamo.utils import counters, get_compilation_metrics
print(json.dumps([dict(counters["aot_autograd"]), sorted(p.name for p in Path(sys.argv[1]).rglob("*.so")),
                  sum(1 for m in get_compilation_metrics() if m.co_name)]))
"""


def test_cache_dir_changed_after_load_is_followed(runtime_python, precompiled_wheel, tmp_path):
    """The files go where torch will read them: installed again into the new dir at the first compile."""
    first, moved = tmp_path / "first", tmp_path / "moved"
    proc = run([runtime_python, "-c", CHANGED_AFTER_LOAD, moved], env={"TORCHINDUCTOR_CACHE_DIR": str(first)})
    aot, kernels, traced = json.loads(proc.stdout.strip().splitlines()[-1])
    # Served from its Dynamo cache entry (nothing traced), or traced with its graph a hit.
    assert (traced == 0 or aot.get("autograd_cache_hit", 0) >= 1) and aot.get("autograd_cache_miss", 0) == 0, aot
    assert kernels == sorted(p.name for p in first.rglob("*.so")), "no kernel compiled in the new dir"
