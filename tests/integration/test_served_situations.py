"""Never wrong when served untraced: a package that only calls torch.compile (tests/situations_pkg),
called in the situations a user's process meets, against a cold compile in the same situation.

Each group of situations (tests/situations_pkg/situations.py) runs in one fresh process with the
package's shipped entries, and in one compiled cold (``PRECOMPILE=0``; the cold processes share an
Inductor cache of their own, so a graph compiled cold in one group loads in another, traced all the
same). Every output, loss and gradient must be the cold compile's. A call is served (nothing traced)
only where what the build's trace read is shown to be the same in this process: its guards as torch
rebuilds them, what no guard holds (the compiler settings, an environment variable it found unset,
the hooks, a call torch folded), and that the call runs under the package's own compile. Where not,
it is traced, and ``served()`` says which check sent it there, in a user's words.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, build_wheel, run

from integration.test_served_compiles import built_with_both_passes
from integration.test_touchpoints import misbehaving

pytestmark = pytest.mark.slow  # builds a wheel, runs torch in fresh processes

SITUATIONS = ROOT / "tests" / "situations_pkg"
SERVED, TRACED = "served", "traced"
# Not told by the frames traced: a code torch compiled earlier in the process may serve the call
# (served() says what became of the shipped entry).
EITHER = "either"
# Served after torch's reset where torch keeps an installed entry (2.13), traced where it drops it
# with the codes it traced (2.14), as served() then says: (the function, torch's word for it).
AFTER_RESET = ("situations_pkg.model.Block.forward", "torch's reset dropped its entry")

# Each group's situations, and whether a served process serves each or traces it.
EXPECTED = {
    "right": {
        "first call": SERVED, "Dynamo's cache size limit raised before a first call": SERVED,
        "a registry filled as models are made, read by a function compiled at import": SERVED,
        "another model instance": SERVED, "a model from a checkpoint": SERVED, "a trained model": SERVED,
        "a compiled module, another instance": SERVED,
        # installed when situations_pkg.model was imported: served only to the package's own compile
        "the package's model compiled by the user, its entry installed at the module's import": TRACED,
        "a closure over another tensor": SERVED,
        "a global tensor mutated in place": SERVED, "a global tensor replaced": SERVED,
        "a function's __defaults__ changed": TRACED, "a library function monkeypatched": TRACED,
        "a subclass overriding a method": TRACED, "a config object passed in, the same values": SERVED,
        "a config object passed in, other values": TRACED,
        "code that asks its config's class, the same class": SERVED,
        "code that asks its config's class, a subclass": TRACED,
        # the copy's memo keys objects by id(): served where they alias one another as the build's did
        "options deep-copied in the compiled region, another instance": SERVED,
        "options deep-copied in the compiled region, two of their lists one and the same": TRACED,
        "another dtype": TRACED, "the default dtype": TRACED,
        "autocast": TRACED, "no_grad": TRACED, "inference_mode": TRACED, "deterministic algorithms": TRACED,
        "a TorchFunctionMode": TRACED, "vmap": TRACED, "seeded RNG and dropout": SERVED,
        "a module imported under another name": SERVED,
        "the same function compiled again by the user, with another backend": TRACED,
        "the package's compile of it still served after": SERVED, "under the profiler": SERVED,
        "a hook registered after the first call": SERVED, "another thread count": TRACED,
    },
    "environment": {
        "a config read from the environment at import (a float, and the name of an activation)": TRACED,
        # installed at situations_pkg.model's import, as the build's proof did, its guarded code never
        # run (a guard rebuilt there would hold 2.0): traced, and said why once the package compiles it
        "a config read from the environment at import, by a function the package compiles at its first use": TRACED,
        "os.environ read while traced, the variable set before import": TRACED,
        "a function that reads neither": SERVED,
    },
    "after_import": {
        "os.environ read while traced, the variable set after import": TRACED,
        "a module attribute set before the package's first use (a float)": TRACED,
        "a module attribute set before the package's first use (a bool)": TRACED,
        # installed at import, under the count then: the entry's thread-count guard takes the count
        # of the compiled module's first call (the set's kernels read it when they run)
        "the thread count set after the package's import, before it compiles a model": SERVED,
        "Inductor's settings changed after import": TRACED,
    },
    "hooks": {
        "a forward hook on a submodule of the compiled module": TRACED, "a backward hook on a submodule": TRACED,
        "a forward hook on a model passed to a compiled function": TRACED,
        "an adapter swapped in for a submodule": TRACED, "a global forward hook": TRACED,
    },
    "optimized": {"python -O, a function with an if __debug__ branch": TRACED,
                  "python -O, a function without one": TRACED},
    "distributed": {"a function that asks whether a process group is initialised": TRACED,
                    "a function that does not ask": SERVED},
    # Torch's compile controls: a shipped guarded code that has not run is a compile still to be made;
    # one that has, a compiled code. "served" here: nothing traced, whether torch ran a call compiled,
    # eagerly, or raised, as a cold process does.
    "controls": {
        "set_stance('eager_then_compile'), then two calls": TRACED,  # eager, then torch compiles the second
        "set_stance('eager_then_compile') as a context manager, then a call after it": SERVED,
        "a warm-up call, then set_stance('eager_on_recompile'), then another batch size": SERVED,
        "set_stance('eager_on_recompile') as a decorator, after a warm-up": SERVED,
        "recompile_limit = 1, then two batch sizes": SERVED,
        "a warm-up call, then the recompile limit lowered to 1, then another batch size": SERVED,
        "set_stance('fail_on_recompile') after a warm-up: the same batch size, then another": SERVED,
        "skip_guard_eval_unsafe after a warm-up: the same batch size, then another": SERVED,
        "set_stance('force_eager'), then back to the default": SERVED,
        "set_stance('default', force_backend='eager'), the RNG seeded": TRACED,
        "a first call, then torch.compiler.reset(), then a variable its trace reads set": TRACED,
        "a first call, then torch._dynamo.reset(), then a variable its trace reads set": TRACED,
        "a first call, then torch._dynamo.reset_code_caches(), then a variable its trace reads set": TRACED,
        "a reset between two models, as a test suite's fixture makes one": AFTER_RESET,
    },
    # Served in every thread, its kernels warm: the set's settings hold there too.
    "threads": {
        "a first call from a worker thread": SERVED, "a thread pool of four calling at once": SERVED,
        "a thread that patches Inductor's config": TRACED,
    },
}

DROPPED = "torch's reset dropped its entry, as it drops the codes it traced"
# What served() says of a function a check sent to tracing (or one of its words).
SAID = {
    "environment": {
        "activate": "a guard holds `EQUALS_MATCH: G['config'].SCALE == 2.0` here where the build's trace held "
                    "`EQUALS_MATCH: G['config'].SCALE == 1.0`",
        "from_environ": "os.environ['SITUATIONS_FACTOR'] is set here; the build's trace read it unset",
        "config_scaled": "a guard holds `EQUALS_MATCH: G['config'].SCALE == 2.0` here where the build's trace held "
                         "`EQUALS_MATCH: G['config'].SCALE == 1.0`",
    },
    "after_import": {
        "from_environ_late": "os.environ['SITUATIONS_LATE_FACTOR'] is set here; the build's trace read it unset",
        "resample": "torch._inductor.config.fallback_random is True here, False when the build compiled",
    },
    "hooks": {
        "Encoder.forward": "1 forward hook(s) on self.a here, where the build's trace ran with none",
        "Decoder.forward": "1 backward pre-hook(s) on self.a here",
        "apply": "1 forward hook(s) on model here",
        "apply_all": "1 global forward hook(s) on every module here",
    },
    "distributed": {
        "world_scaled": "torch.distributed.is_initialized() is True here; the build's trace folded False into the code",
    },
    # After torch's reset, the checks made again (torch 2.13 keeps an installed entry), or the entry
    # dropped with the codes torch traced (2.14)
    "controls": {
        "reset_read": ("os.environ['SITUATIONS_RESET_FACTOR'] is set here; the build's trace read it unset", DROPPED),
        "dynamo_reset_read": ("os.environ['SITUATIONS_DYNAMO_RESET_FACTOR'] is set here", DROPPED),
        "code_caches_read": ("os.environ['SITUATIONS_CODE_CACHES_FACTOR'] is set here", DROPPED),
    },
    "threads": {
        "patched_in_thread": "torch._inductor.config.fallback_random is True here, False when the build compiled",
    },
}

# What served() says of a function a call of which torch's compile controls left to torch.
LEFT = {
    "controls": {
        "eager_then_compile": "under torch.compiler.set_stance('eager_then_compile') torch runs a frame's first call "
                              "eagerly and compiles the next (traced); this guarded code had not run since",
        "eager_on_recompile": "under torch.compiler.set_stance('eager_on_recompile') torch runs a call no compiled "
                              "code serves eagerly",
        "stance_decorator": "under torch.compiler.set_stance('eager_on_recompile')",
        "recompile_limit": "the recompile limit (1) is reached: this frame holds 1 compiled code(s), and torch runs "
                           "the call eagerly",
        "limit_lowered_after": "the recompile limit (1) is reached",
        "fail_on_recompile": "under torch.compiler.set_stance('fail_on_recompile') torch raises at a call no compiled "
                             "code serves",
        "skip_guard_eval": "under torch.compiler.set_stance(skip_guard_eval_unsafe=True) torch raises at a call no "
                           "compiled code serves",
        "forced": "torch.compiler.set_stance(force_backend='eager') compiles with another backend than the build's",
    },
}


@pytest.fixture(scope="session")
def situations_site(tmp_path_factory) -> Path:
    """tests/situations_pkg built (both passes) and unpacked under ``site/``, its output in ``build.log``,
    and situations.py beside them (run from outside the source tree, whose package has no set).
    Built under umask 002, a login default where each user has a group: the build's proof still
    serves every function (its run dirs are private, as load() asks of a cache dir's parents)."""
    return built_with_both_passes(tmp_path_factory, SITUATIONS, SITUATIONS / "situations.py", umask="002")


def run_group(python: Path, script: Path, work: Path, group: str, env: dict[str, str] | None = None,
              site: Path | None = None) -> dict:
    """``script`` (situations.py) run for ``group`` in a fresh process of ``python`` in ``work``, the
    package from ``site`` (else ``python``'s own): its JSON line."""
    work.mkdir(parents=True, exist_ok=True)
    optimized = ["-O"] if group == "optimized" else []
    variables = {"TORCHINDUCTOR_CACHE_DIR": str(work / "cache"), **({"PYTHONPATH": str(site)} if site else {})}
    proc = run([python, *optimized, script, group], cwd=work, env={**variables, **(env or {})})
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_served_as_cold(python: Path, script: Path, work: Path, group: str, cold_cache: Path,
                          site: Path | None = None, expected: dict | None = None, said: dict | None = None,
                          package: str = "situations_pkg.model") -> dict:
    """``group``'s situations served and cold: the same outputs, each served or traced as ``expected``
    (EXPECTED) says, and served() saying why as ``said`` (SAID) says, of ``package``'s functions
    (``""``: ``said`` names them whole); what the served process printed."""
    EXPECTED, SAID = expected or globals()["EXPECTED"], said or globals()["SAID"]
    served = run_group(python, script, work / "served", group, site=site)
    cold = run_group(python, script, work / "cold", group, site=site,
                     env={"PRECOMPILE": "0", "TORCHINDUCTOR_CACHE_DIR": str(cold_cache)})
    assert served["reason"] == "installed" and cold["reason"].startswith("disabled by PRECOMPILE")
    assert list(served["results"]) == list(EXPECTED[group]) == list(cold["results"])
    wrong = [name for name, (_, outputs) in served["results"].items()
             if outputs != pytest.approx(cold["results"][name][1], rel=1e-5, abs=1e-5)]
    assert not wrong, {name: (served["results"][name], cold["results"][name]) for name in wrong}
    for name, how in EXPECTED[group].items():
        traced = served["results"][name][0]
        if how == EITHER:
            continue
        if how == AFTER_RESET:
            function, dropped = how
            how = TRACED if dropped in served["served"][function] else SERVED
        assert (traced == 0) == (how == SERVED), f"{name}: expected {how}, {traced} frame(s) traced: {served['served']}"
    for function, words in SAID.get(group, {}).items():
        outcome = served["served"][f"{package}.{function}" if package else function]
        assert outcome.startswith("traced: ") and any(s in outcome for s in (words if isinstance(words, tuple) else (words,))), outcome
    for function, words in LEFT.get(group, {}).items():
        outcome = served["served"][f"{package}.{function}" if package else function]
        assert f"; a call left to torch: {words}" in outcome, outcome
    if group == "threads":  # served there with the kernels the build built: none compiled
        assert all(served["kernels"][name] == 0 for name, how in EXPECTED[group].items() if how == SERVED), served
    if group == "optimized":
        assert served["served"] == {} and served["notes"] == [
            "its compiled functions are traced: this process runs Python at optimization level 1 (-O), its build's "
            "trace read bytecode of level 0"]
    if group == "after_import":  # installed at situations_pkg.model's import, with the build's values
        # there: the guards torch rebuilt then hold those, and trace the calls made after the change
        assert {"situations_pkg.model.shift", "situations_pkg.model.bias",
                "situations_pkg.model.Threaded.forward"} <= set(served["at_import"]), served
        assert served["served"]["situations_pkg.model.shift"].startswith("served: "), served["served"]
    if group == "environment":  # installed at import, never run: a guard torch rebuilt there holds 2.0
        assert "situations_pkg.model.config_scaled" in served["at_import"], served
    if group == "right":  # the user's compile ran under the user's backend; the package's, served
        assert served["served"]["situations_pkg.model.loss_fn"].startswith("served: 1 guarded code(s)")
        # its guards read the registry by position: not there at import, so installed at its first call
        assert served["served"]["situations_pkg.model.registered_scale"].startswith("served: 1 guarded code(s)")
        # ... from the entry read at torch.compile to load its graphs: no entry's pickle is read twice
        assert served["entry_reads"] == 1, served["entry_reads"]
        assert served["results"]["the same function compiled again by the user, with another backend"][1][1] == 1
        # the module the package compiles at its first use: its entry installed when situations_pkg.model
        # was imported, as the build's proof installed it, and said to be served once the package compiled it
        assert "situations_pkg.model.Block.forward" in served["at_import"], served["at_import"]
        assert served["served"]["situations_pkg.model.Block.forward"].startswith("served: "), served["served"]
    return served


@pytest.fixture(scope="module")
def cold_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("situations-cold") / "cache"


def test_the_build_serves_every_compiled_function(situations_site):
    log = (situations_site / "build.log").read_text()
    assert BUILT in log and "precompile: served 42 of 42 compiled function(s) untraced, proven in a fresh process" in log
    assert "not served untraced" not in log, log
    # The proof installed the entry that reads a registry by position at its first call (not there at
    # import): the index says so, and a user's process does not try it at torch.compile.
    precompiled = situations_site / "site" / "situations_pkg" / "_precompiled"
    manifest = json.loads(next((precompiled / "sets").glob("*/manifest.json")).read_text())
    index = json.loads((precompiled / "blobs" / manifest["files"]["dynamo/served.json"]["sha256"]).read_bytes())
    at = {f["qualname"]: f.get("install_at", "compile") for f in index["functions"].values()}
    assert at.pop("registered_scale") == "first-call", at
    # ... and each function the package compiles at its first use (the models' forwards, on_first_use's)
    # as soon as situations_pkg.model was imported: a user's process installs those there too.
    at_import = {name for name, where in at.items() if where == "import"}
    assert at_import == {"Block.forward", "Decoder.forward", "Encoder.forward", "Stem.forward", "Tuned.forward",
                         "Threaded.forward", "bias", "shift", "config_scaled"}, at
    assert {at[name] for name in set(at) - at_import} == {"compile"}, at


BUILT = "precompile: 42 compiled function(s) served without Dynamo tracing them (54 guarded code(s))"


@pytest.mark.parametrize("group", list(EXPECTED))
def test_each_situation_computes_what_a_cold_compile_computes(situations_site, cold_cache, tmp_path, group):
    assert_served_as_cold(Path(sys.executable), situations_site / "situations.py", tmp_path, group, cold_cache,
                          site=situations_site / "site")


ONE_FUNCTION = """
import torch

SCALE = 2.0


def scaled(x):
    return torch.tanh(x) * SCALE


compiled = torch.compile(scaled)


def workload():
    compiled(torch.ones(4))
"""


def test_an_entry_that_would_not_install_for_a_user_is_not_shipped_and_the_build_says_why(tmp_path):
    """The build installs its entries and runs its workloads again in a fresh process, as a user's; torch
    refusing the entry there (here made to, as torch 2.13 does for GPT-2's functions with an
    IndexError while it rebuilds the guards) takes it out of the wheel, named with torch's words."""
    project = tmp_path / "one_fn"
    (project / "one_fn").mkdir(parents=True)
    (project / "one_fn" / "__init__.py").write_text("import hatch_precompile\n\nhatch_precompile.load(__name__)\n")
    (project / "one_fn" / "model.py").write_text(ONE_FUNCTION)
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling", "hatch-precompile"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "one-fn"\nversion = "0.1.0"\n[tool.hatch.build.targets.wheel]\npackages = ["one_fn"]\n'
        '[tool.hatch.build.hooks.precompile]\nworkload = "one_fn.model:workload"\n')
    proc, wheel = build_wheel(project, tmp_path / "dist", env={"HATCH_PRECOMPILE_NO_DYNAMO_CACHE": "0",
                                                               **misbehaving("compile-package")})
    assert "precompile: 1 compiled function(s) served without Dynamo tracing them" in proc.stdout, proc.stdout
    assert ("precompile: warning: not served untraced: one_fn.model.scaled: torch could not install the shipped "
            "Dynamo cache entry: RuntimeError('misbehaving on purpose')") in proc.stdout, proc.stdout
    assert "precompile: served 0 of 1 compiled function(s) untraced, proven in a fresh process" in proc.stdout
    with zipfile.ZipFile(wheel) as archive:
        (manifest,) = [json.loads(archive.read(n)) for n in archive.namelist() if n.endswith("manifest.json")]
    assert not any(name.startswith("dynamo/") for name in manifest["files"]), manifest["files"]  # nothing of it ships
    assert manifest["served"] == {"functions": 1, "served": 0, "proof": "ok", "not_served": {
        "one_fn.model.scaled": "torch could not install the shipped Dynamo cache entry: RuntimeError('misbehaving on "
                               "purpose')"}}


FIRST_CALLS = r"""
import json, torch
import situations_pkg
from situations_pkg import model as M
from torch._dynamo.utils import get_compilation_metrics
from hatch_precompile.run.served import served_compile
x, y = M.batch()
net, eager = M.make(), M.make()
loss, want = M.compiled_loss(net, x, y), M.loss_fn(eager, x, y)
loss.backward()
want.backward()
grads = max((a.grad - b.grad).abs().max().item() for a, b in zip(net.parameters(), eager.parameters()))
world = (M.world(x) - M.world_scaled(x)).abs().max().item()
print(json.dumps({"served": served_compile.served(), "traced": sum(1 for m in get_compilation_metrics() if m.co_name),
                  "diff": abs(loss.item() - want.item()), "grads": grads, "world": world}))
"""


UNREAD = "; a call left to torch: torch's compile controls cannot be read here ("


@pytest.mark.parametrize("broken, loss_fn, world", [
    ("guard-text", "traced: its guards as torch rebuilt them here cannot be read", "traced: its guards"),
    ("compile-context", "traced: which torch.compile a call of it runs under cannot be told", "traced: which"),
    ("compiler-settings", "traced: this process's compiler settings cannot be read", "traced: this process's"),
    # torch.distributed's functions renamed: the objects the build's trace held (its guards held them)
    # are not there, so the call is traced before its folded answers are asked
    ("folded-calls", "served: 1 guarded code(s)", "traced: (G['dist'].is_available).__code__ is another object"),
    # torch's compile controls: where one cannot be read, or followed, the call is torch's
    ("compile-stance", UNREAD, UNREAD),
    ("recompile-limit", UNREAD, UNREAD),
    ("cache-entry-list", UNREAD, UNREAD),
    ("cache-size", "traced: torch's recompile limit cannot be followed here (torch moved)", "traced: torch's recompile"),
    ("code-caches-reset", "traced: torch's resets cannot be followed here (torch moved)", "traced: torch's resets"),
])
def test_a_check_whose_torch_internals_misbehave_traces_the_call_never_wrong(situations_site, tmp_path, broken,
                                                                             loss_fn, world):
    script = tmp_path / "first_calls.py"
    script.write_text(FIRST_CALLS)
    found = run_group(Path(sys.executable), script, tmp_path / "run", "first calls",
                      env=misbehaving(broken, situations_site / "site"))
    assert found["diff"] < 1e-6 and found["grads"] < 1e-6 and found["world"] == 0
    for function, said in (("loss_fn", loss_fn), ("world_scaled", world)):
        outcome = found["served"][f"situations_pkg.model.{function}"]
        assert outcome.startswith(said) or said == UNREAD and UNREAD in outcome, found["served"]
    if UNREAD in (loss_fn, world):
        assert found["traced"] > 0  # left to torch, which traced them
