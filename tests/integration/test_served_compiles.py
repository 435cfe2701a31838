"""A package that only calls torch.compile: its compiled functions served without Dynamo tracing them,
every guard kept (run/served/served_compile.py), against a cold compile of the same calls.

tests/compile_pkg is built once (both build passes); each case runs in one fresh process served and
in one with PRECOMPILE=0 (compiled cold), and every output and gradient must be the cold compile's.
A case Dynamo's guards let through is served (nothing traced); a case they stop is traced, as
without hatch-precompile -- including the guards torch's caching_precompile drops (an object's
identity: a monkeypatched function), which hatch-precompile holds itself.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from conftest import ROOT, build_wheel, built_once, copy_project, run, unpack

from integration.test_touchpoints import misbehaving

pytestmark = pytest.mark.slow  # builds a wheel, runs torch in fresh processes

COMPILE_PKG = ROOT / "tests" / "compile_pkg"


def built_with_both_passes(tmp_path_factory, project: Path, *also: Path, umask: str | None = None) -> Path:
    """``project`` built once (both passes: its compiled functions' Dynamo cache entries; under
    ``umask``, where given) and unpacked under ``site/``; its output in ``build.log``, and each of
    ``also`` copied beside them."""
    def build(out: Path) -> None:
        proc, wheel = build_wheel(copy_project(out / "src" / project.name, project), out / "dist",
                                  env={"HATCH_PRECOMPILE_NO_DYNAMO_CACHE": "0"}, umask=umask)
        (out / "build.log").write_text(proc.stdout)
        unpack(wheel, out / "site")
        for path in also:
            shutil.copy(path, out / path.name)

    return built_once(tmp_path_factory, project.name, build)


@pytest.fixture(scope="session")
def compile_build(tmp_path_factory) -> Path:
    """tests/compile_pkg built (both passes) and unpacked under ``site/``; its output in ``build.log``."""
    return built_with_both_passes(tmp_path_factory, COMPILE_PKG)


# Each case: (how many frames Dynamo traced for it, what it computed). Run served, then cold.
CASES = r"""
import json, sys
import torch
import torch.nn.functional as F
import compile_pkg
from compile_pkg import model as M, wrapping
from torch._dynamo.utils import get_compilation_metrics
from hatch_precompile.run.served import served_compile

# The loss recompiles for each case its guards stop: more than torch's default limit of 8 codes a frame,
# past which both processes would run it eagerly and the later cases would prove no guard.
torch._dynamo.config.recompile_limit = 32
results = {}
def case(name, run):
    before = sum(1 for m in get_compilation_metrics() if m.co_name)
    out = run()
    results[name] = [sum(1 for m in get_compilation_metrics() if m.co_name) - before, out]

def trained(net, x, y):  # the loss and every gradient, as a training step leaves them
    loss = M.compiled_loss(net, x, y)
    loss.backward()
    return [loss.item()] + [p.grad.double().sum().item() for p in net.parameters()]

def changed(module, name, value, run):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        return run()
    finally:
        setattr(module, name, old)

x, y = M.batch()
case("first call", lambda: trained(M.make(), x, y))
case("another model instance", lambda: trained(M.make(seed=5), x, y))
def attribute():
    net = M.make()
    net.scale = 3.0
    return trained(net, x, y)
case("a changed module attribute", attribute)
case("another shape", lambda: trained(M.make(), *M.batch(5)))
case("another dtype", lambda: trained(M.make().double(), x.double(), y))
def input_grad():
    xr = x.clone().requires_grad_(True)
    return trained(M.make(), xr, y) + [xr.grad.sum().item()]
case("an input that requires grad", input_grad)
case("eval against train", lambda: trained(M.make().eval(), x, y))
case("a mutated global", lambda: changed(M, "LABEL_SMOOTHING", 0.1, lambda: trained(M.make(), x, y)))
def mutated_dict():
    M.CONFIG["temperature"] = 2.0
    try:
        return trained(M.make(), x, y)
    finally:
        M.CONFIG["temperature"] = 1.0
case("a mutated global dict", mutated_dict)
real_gelu = F.gelu
case("a library function monkeypatched", lambda: changed(F, "gelu", lambda t, approximate="none": real_gelu(t) * 2,
                                                           lambda: trained(M.make(), x, y)))
with torch.no_grad():
    case("a compiled module, another instance", lambda: [M.predictor(M.make(seed=7).eval())(x).sum().item()])
    case("a compiled module in train()", lambda: [M.predictor(M.make(seed=7).train())(x).sum().item()])
    case("a closure under no_grad", lambda: [M.scaled(torch.arange(32.0))(x).sum().item()])
case("a closure over another object", lambda: [M.scaled(torch.arange(32.0))(x).sum().item()])
def features():
    net = M.make(seed=2)
    out = M.compiled_features(net, x).sum()
    out.backward()  # the backward compiled at build, beside its forward
    return [out.item()] + [p.grad.double().sum().item() for p in net.net[0].parameters()]
case("a graph first differentiated by its user", features)
case("a function compiled by decorator", lambda: [M.normalized(x * 3).sum().item()])
def classified(seed):
    net = M.classifier(seed)
    loss = net(x, y)
    loss.backward()
    return [loss.item()] + [p.grad.double().sum().item() for p in net.parameters()]
case("a loss chosen by a property's getter, a frame of its own", lambda: classified(0))
case("the same, another instance", lambda: classified(3))
def decorated(seed):
    net = M.decorated(seed)
    out = net(x).sum()
    out.backward()
    return [out.item(), wrapping.CALLS["count"], float(wrapping.CALLS.get("last") == "forward")] + [p.grad.double().sum().item() for p in net.parameters()]
case("a forward decorated from another module", lambda: decorated(0))
case("a decorated forward, its wrapper's global changed", lambda: decorated(4))
case("a result rebuilt from a module the code holds by no name", lambda: [v.item() for v in M.summary(x).values()])
case("a closure over a function", lambda: [M.doubled(F.softsign)(x).sum().item()])
case("a closure over another function", lambda: [M.doubled(F.tanhshrink)(x).sum().item()])
case("a function whose guards torch could not save", lambda: [M.cached(x).sum().item()])
# The ways users compile (compile_pkg/styles.py). The user's own regional compile comes first: in a cold
# process, the package's later ones then find torch's code for it, as the served process finds the package's.
from compile_pkg import styles as S
import regional_lib
torch.manual_seed(4)
case("a library's regional compile made by the user", lambda: [regional_lib.compile_repeated_blocks(
    S.Stack(), ("Block",))(x).sum().item()])
def self_compiled(seed):
    net = S.self_compiled(seed)
    out = net(x).sum()
    out.backward()
    return [out.item()] + [p.grad.double().sum().item() for p in net.parameters()]
case("a compiled optimizer step", lambda: S.trained_by_compiled_step(0))
case("a compiled optimizer step, another optimizer and model", lambda: S.trained_by_compiled_step(6))
case("a compiled optimizer step, an optimizer of another class", lambda: S.trained_by_compiled_step(0, torch.optim.SGD))
case("a module's own compile(), called by its user", lambda: self_compiled(0))
case("a module's own compile(), another instance", lambda: self_compiled(6))
case("blocks compiled in a loop", lambda: [S.regional()(x).sum().item()])
case("blocks compiled by a library the package calls", lambda: [S.library_regional(2)(x).sum().item()])
def marked():
    rows = M.batch(5)[0]
    torch._dynamo.mark_dynamic(rows, 0)
    return [S.dynamic_rows(rows).sum().item()]
case("inputs marked dynamic, another size", marked)
case("a backend whose graphs torch does not save", lambda: [S.aot_eager_shifted(x).sum().item()])
case("a module-level numpy array", lambda: [S.compiled_numpy_scaled(x).sum().item()])
# Another package's compile in the same process keeps every guard torch has: an object replaced.
class Holder:
    def __init__(self, w):
        self.w = w
holder = Holder(2.0)
def outside(t):
    return t * holder.w
outside_compiled = torch.compile(outside)
first = outside_compiled(x).sum().item()
holder = Holder(3.0)
case("another package's compile, a global replaced", lambda: [first, outside_compiled(x).sum().item()])
print(json.dumps({"results": results, "served": served_compile.served(),
                  "caching_precompile": torch._dynamo.config.caching_precompile,
                  "reason": compile_pkg.precompile_status.reason}))
"""

CALL_IMPL = "torch.nn.modules.module.Module._call_impl"  # what every module.compile() compiles
SERVED = ("first call", "another model instance", "a graph first differentiated by its user", "a compiled module, another instance", "a compiled module in train()",
          "a closure over another object", "a function compiled by decorator", "a loss chosen by a property's getter, a frame of its own",
          "the same, another instance", "a closure over a function", "a forward decorated from another module",
          "a result rebuilt from a module the code holds by no name", "a module's own compile(), called by its user",
          "a module's own compile(), another instance", "blocks compiled in a loop",
          "blocks compiled by a library the package calls", "inputs marked dynamic, another size",
          "a compiled optimizer step", "a compiled optimizer step, another optimizer and model")
TRACED = ("a changed module attribute", "another shape", "another dtype", "an input that requires grad",
          "eval against train", "a mutated global", "a mutated global dict", "a library function monkeypatched",
          "a closure under no_grad", "another package's compile, a global replaced",
          "a closure over another function", "a decorated forward, its wrapper's global changed",
          "a function whose guards torch could not save", "a library's regional compile made by the user",
          "a backend whose graphs torch does not save", "a module-level numpy array",
          "a compiled optimizer step, an optimizer of another class")


def run_cases(site: Path, tmp_path: Path, name: str, env: dict[str, str] | None = None,
              script: str = CASES) -> dict:
    (tmp_path / name).mkdir()
    proc = run([sys.executable, "-c", script], cwd=tmp_path / name,
               env={"PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / name / "cache"), **(env or {})})
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_guard_is_kept_each_call_served_or_traced_as_a_cold_compile_computes(compile_build, tmp_path):
    log = (compile_build / "build.log").read_text()
    # 9: torch alone fails the whole second pass at the property's getter (PackageError); named here, it is served.
    # And torch alone saves no graph for `features`, whose backward the workload never ran.
    # The closure over a function is held at each call to the code the build's held (a source in the call's locals).
    # 10 guarded codes: the module compiled in eval() and in train() keeps both, where torch keeps the last compile.
    # Every module.compile() of the package (its model's own, a loop over blocks, a library's regional
    # compile it calls) compiles torch's Module._call_impl: 3 guarded codes, shipped as one entry per
    # class (the model's; the block's, from the loop and the library), each installed as its class compiles.
    # A compiled optimizer step: 3 guarded codes (the user's step, torch's profile_hook_step, Adam.step),
    # which torch alone bypasses (a graph holding the parameters) and holds by the optimizer's identity.
    assert "precompile: 12 compiled function(s) served without Dynamo tracing them (17 guarded code(s))" in log, log
    # ... and proven so before they shipped: installed and run in a fresh process as a user's. Of the
    # package's 15 compiled functions, the three below are not served.
    assert "precompile: served 12 of 15 compiled function(s) untraced, proven in a fresh process" in log, log
    # The kernels only the second pass built (the backward of a module compiled in train(), which the
    # workload never ran: torch lowers it for the entry) are shipped: served, the replay builds none.
    proof = next(line for line in log.splitlines() if line.startswith("precompile (served, proven): workload "))
    assert " 0 kernel(s)" in proof and re.search(r"second pass\): workload .* [1-9]\d* kernel\(s\)", log), log
    # `cached` calls a local function's lru_cache, whose guards torch cannot save: torch alone fails the
    # whole second pass there (an AssertionError after it marked the entry bypassed). `numpy_scaled` reads a
    # module's numpy array, whose guard torch fails to create for saving: torch alone fails the pass with
    # it. `shifted` is compiled with aot_eager, whose graphs torch does not save. Each named, unserved.
    unserved = {line.split(": ")[2]: line.split(": ", 3)[3] for line in log.splitlines()
                if line.startswith("precompile: not served untraced: ")}
    assert sorted(unserved) == ["compile_pkg.model.cached", "compile_pkg.styles.numpy_scaled",
                                "compile_pkg.styles.shifted"], unserved
    assert unserved["compile_pkg.model.cached"].startswith("torch could not save its guards (") \
        and "_cached_scale.<locals>.scale" in unserved["compile_pkg.model.cached"], unserved
    line = (COMPILE_PKG / "compile_pkg" / "styles.py").read_text().splitlines().index(
        "def numpy_scaled(x: torch.Tensor) -> torch.Tensor:") + 1
    assert unserved["compile_pkg.styles.numpy_scaled"] == (
        f"torch failed to compile numpy_scaled (styles.py:{line}) for saving: torch._dynamo.exc.InternalTorchDynamoError: "
        "RuntimeError: Boolean value of Tensor with more than one value is ambiguous"), unserved
    assert unserved["compile_pkg.styles.shifted"].endswith("it was compiled with backend='aot_eager'"), unserved
    served = run_cases(compile_build / "site", tmp_path, "served")
    cold = run_cases(compile_build / "site", tmp_path, "cold", {"PRECOMPILE": "0"})
    assert served["reason"] == "installed" and not served["caching_precompile"]
    shipped = {"compile_pkg.model.Classifier.forward": 1, "compile_pkg.model.Decorated.forward": 1,
               "compile_pkg.model.MLP.forward": 2, "compile_pkg.model.doubled.<locals>.apply": 1,
               "compile_pkg.model.features": 1, "compile_pkg.model.loss_fn": 1, "compile_pkg.model.normalized": 1,
               "compile_pkg.model.scaled_by.<locals>.scaled_sum": 1, "compile_pkg.model.summary": 1,
               "compile_pkg.styles.rows": 1, "compile_pkg.styles.trained_by_compiled_step.<locals>.step": 3}
    assert sorted(served["served"]) == sorted({*shipped, *unserved, CALL_IMPL}), served["served"]
    for name, codes in shipped.items():
        assert served["served"][name].startswith(f"served: {codes} guarded code(s)"), served["served"]
    assert re.fullmatch(r"served: compile_pkg\.model\.MLP: 1 guarded code\(s\), \d+ object\(s\) held to the build's; "
                        r"compile_pkg\.styles\.Block: 2 guarded code\(s\), \d+ object\(s\) held to the build's",
                        served["served"][CALL_IMPL]), served["served"]
    for name, why in unserved.items():  # said where the package compiles it, not left out
        assert served["served"][name] == f"traced: the build did not serve it untraced: {why}", served["served"]
    # A call the shipped codes did not serve is said, with the guard that failed: served() never
    # calls a function served and no more where its calls trace (the loss, at another shape and more).
    assert re.search(r"; \d+ call\(s\) traced here: 1 of its 1 shipped guarded code\(s\) failed a guard \(",
                     served["served"]["compile_pkg.model.loss_fn"]), served["served"]
    assert "call(s) traced here" not in served["served"]["compile_pkg.model.MLP.forward"], served["served"]
    for name, (traced, outputs) in served["results"].items():
        cold_traced, cold_outputs = cold["results"][name]
        assert outputs == pytest.approx(cold_outputs, rel=1e-5, abs=1e-6), name
        if name in SERVED:
            assert traced == 0, f"{name}: served, so nothing traced"
        else:
            assert name in TRACED and traced >= 1, f"{name}: its guards stop the shipped code, so it is traced"
            # An optimizer of another class: torch's trace of its wrapper makes the wrapper's resume function
            # again (its cache of them never saw the entry's, whose code holds no guarded code), one frame more.
            again = int(name == "a compiled optimizer step, an optimizer of another class")
            assert traced == cold_traced + again, f"{name}: traced as the cold compile traces it"
    assert cold["results"]["first call"][0] >= 1  # the cold process really compiled
    first, replaced = served["results"]["another package's compile, a global replaced"][1]
    assert replaced == pytest.approx(first * 1.5)  # its identity guard was not dropped: recompiled for the new object


MODEL_ONLY = r"""
import json, torch
from torch._dynamo import package
from compile_pkg import model as M, styles as S
from torch._dynamo.utils import get_compilation_metrics
from hatch_precompile.run.served import served_compile
built, build = [], package.load_guard_manager
package.load_guard_manager = lambda *args: built.append(1) or build(*args)  # each guard manager torch rebuilds
x, _ = M.batch()
out = S.self_compiled(0)(x).sum().item()
print(json.dumps({"served": served_compile.served(), "built": len(built), "out": out,
                  "traced": sum(1 for m in get_compilation_metrics() if m.co_name)}))
"""


def test_a_process_that_compiles_one_module_class_installs_that_classs_part_only(compile_build, tmp_path):
    """The model's own compile() installs the model's part of torch's one Module._call_impl entry: its
    one guarded code's guards are rebuilt, the block's two are not (nor are the sources they inlined
    checked), and the call is served, equal to a cold compile's."""
    served = run_cases(compile_build / "site", tmp_path, "model-only", script=MODEL_ONLY)
    cold = run_cases(compile_build / "site", tmp_path, "model-only-cold", {"PRECOMPILE": "0"}, script=MODEL_ONLY)
    assert re.fullmatch(r"served: compile_pkg\.model\.MLP: 1 guarded code\(s\), \d+ object\(s\) held to the build's",
                        served["served"][CALL_IMPL]), served["served"]
    assert served["built"] == 1 and served["traced"] == 0 and cold["traced"] >= 1, (served, cold)
    assert served["out"] == pytest.approx(cold["out"], rel=1e-6)


MONKEYPATCHED_FIRST = r"""
import json, torch
import torch.nn.functional as F
real = F.gelu
F.gelu = lambda t, approximate="none": real(t) * 2  # before the package's import: its entry's gelu is not this
import compile_pkg
from compile_pkg import model as M
from torch._dynamo.utils import get_compilation_metrics
from hatch_precompile.run.served import served_compile
net, (x, y) = M.make(), M.batch()
got, want = M.compiled_loss(net, x, y).item(), M.loss_fn(net, x, y).item()
print(json.dumps({"served": served_compile.served(), "traced": sum(1 for m in get_compilation_metrics() if m.co_name), "diff": abs(got - want)}))
"""


def test_a_function_monkeypatched_before_the_packages_import_is_traced_and_named(compile_build, tmp_path):
    found = run_cases(compile_build / "site", tmp_path, "patched", script=MONKEYPATCHED_FIRST)
    assert found["traced"] >= 1 and found["diff"] < 1e-6
    assert found["served"]["compile_pkg.model.loss_fn"].startswith(
        "traced: G['F'].gelu is another object than the build's (__main__.<lambda>)"), found["served"]


# A script's opening: torch's loading of each compiled graph counted, in ``loaded``.
GRAPH_LOADS_COUNTED = r"""
import json, torch
from torch._functorch._aot_autograd import aot_autograd_result as R
loaded, load = [], R.BundledAOTAutogradCacheArtifact.after_deserialization
def counted(self):
    loaded.append(self.key)
    return load(self)
R.BundledAOTAutogradCacheArtifact.after_deserialization = counted
"""

INFERENCE_ONLY = GRAPH_LOADS_COUNTED + r"""
from compile_pkg import model as M
from torch._dynamo.utils import get_compilation_metrics
from hatch_precompile.run.served import served_compile
at_import = len(loaded)
x, _ = M.batch()
with torch.no_grad():
    net = M.make().eval()
    got, want = M.predictor(net)(x), net(x)
    M.predictor(net)(x)
print(json.dumps({"served": served_compile.served(), "at_import": at_import, "loaded": len(loaded),
                  "traced": sum(1 for m in get_compilation_metrics() if m.co_name), "diff": (got - want).abs().max().item()}))
"""


def test_a_process_that_only_infers_loads_the_one_graph_it_runs(compile_build, tmp_path):
    """The module's entry holds its eval() and its train() compile: only the eval() graph is loaded,
    at its first call, and then served. The functions compiled at import, one compile each, had
    theirs loaded then (as torch loads an entry), so that their first call runs at once."""
    found = run_cases(compile_build / "site", tmp_path, "inference", script=INFERENCE_ONLY)
    assert found["served"]["compile_pkg.model.MLP.forward"].startswith("served: 2 guarded code(s)"), found["served"]
    assert found["served"]["compile_pkg.model.loss_fn"].startswith("served"), found["served"]
    assert found["at_import"] >= 3, found  # loss_fn, normalized, summary
    assert found["loaded"] - found["at_import"] == 1 and found["traced"] == 0, found
    assert found["diff"] < 1e-6
    # A graph that does not load in this process: at its first run, that guarded code is traced.
    broken = run_cases(compile_build / "site", tmp_path, "graph-load", script=INFERENCE_ONLY,
                       env=misbehaving("graph-load", compile_build / "site"))
    assert broken["served"]["compile_pkg.model.MLP.forward"].startswith(
        "traced: a guarded code's compiled graphs did not load here (RuntimeError('misbehaving on purpose')); "
        "at install, served: 2 guarded code(s)"), broken["served"]
    assert broken["traced"] >= 1 and broken["diff"] < 1e-6


FIRST_CALL = r"""
import json, sys, traceback
ON_LOAD = set()  # each of LOWERINGS imported while torch loaded a graph from its cache, or an entry installed


class Watch:
    def find_spec(self, name, path=None, target=None):
        if name not in LOWERINGS:
            return
        frames = traceback.extract_stack()
        if any(f.name == "find_spec" and "importlib" in f.filename and "util" in f.filename for f in frames):
            return  # importlib.util.find_spec: read, not imported
        if any(f.name in ("cache_hit_post_compile", "_compiled") or f.filename.endswith("dynamo_cache.py")
               for f in frames):
            ON_LOAD.add(name)


sys.meta_path.insert(0, Watch())
import compile_pkg
from compile_pkg import model as M
from torch._dynamo.utils import get_compilation_metrics
from hatch_precompile.run.served import served_compile
net, (x, y) = M.make(), M.batch()
loss = M.compiled_loss(net, x, y)
loss.backward()
eager = M.make()
want = M.loss_fn(eager, x, y)
want.backward()
grads = max((a.grad - b.grad).abs().max().item() for a, b in zip(net.parameters(), eager.parameters()))
print(json.dumps({"served": served_compile.served(), "traced": sum(1 for m in get_compilation_metrics() if m.co_name),
                  "diff": abs(loss.item() - want.item()), "grads": grads,
                  "lowerings": sorted(ON_LOAD)}))
"""
# What torch.compile and loading a graph from Inductor's cache import as torch has them (the lowerings,
# the kernel templates and their registry, the decomposition tables the entry names, Inductor's debug
# module the loaded code reads, the minifier that wraps the backend, the extension builder whose paths
# the kernels' compile commands name), and a served process does without.
LOWERINGS = {"torch._inductor.lowering", "torch._inductor.select_algorithm", "torch._inductor.graph",
             "torch._inductor.codegen.memory_planning", "torch._inductor.kernel.mm", "torch._inductor.decomposition",
             "torch._inductor.debug", "torch._dynamo.repro.after_dynamo", "networkx", "torch.utils.cpp_extension"}
FIRST_CALL = FIRST_CALL.replace("import json, sys, traceback", f"import json, sys, traceback\nLOWERINGS = {LOWERINGS!r}")


def test_a_served_process_loads_its_graphs_without_inductors_lowerings(compile_build, tmp_path):
    """The shipped generated modules import only the extern kernels their code calls, bound as
    Inductor binds them (proven by identity at build), and torch's cache hit finds a stand-in for
    the module it imports to read a test hook, and the entry's pickle a stand-in for the
    decomposition tables only a compile reads: installing the entry and loading the served graphs
    imports none of the lowerings (the package's unserved function imports them at its
    torch.compile, after the functions above it loaded theirs), and their first call and backward
    compute what eager does."""
    log = (compile_build / "build.log").read_text()
    assert re.search(r"precompile: \d+ generated module\(s\) import only what their code calls", log), log
    blobs = (compile_build / "site" / "compile_pkg" / "_precompiled" / "blobs").iterdir()
    shipped = [b for b in (p.read_bytes() for p in blobs) if b.startswith(b"# AOT ID")]  # the generated modules
    assert not [b for b in shipped if b"from torch._inductor.select_algorithm import extern_kernels" in b]
    assert [b for b in shipped if b"extern_kernels = __import__('types').SimpleNamespace(" in b]
    found = run_cases(compile_build / "site", tmp_path, "lean", script=FIRST_CALL)
    assert found["served"]["compile_pkg.model.loss_fn"].startswith("served"), found["served"]
    assert found["traced"] == 0 and found["diff"] < 1e-6 and found["grads"] < 1e-6, found
    assert found["lowerings"] == [], found["lowerings"]


@pytest.mark.parametrize("broken, outcome", [
    ("compile-calls", "served: 1 guarded code(s)"),  # torch.compile an object of another kind: wrapped all the same
    ("compiler-config", "served: 1 guarded code(s)"),  # the config asked at the call, as torch does
    ("compile-package", "traced: torch could not install the shipped Dynamo cache entry"),
    ("guard-load", "traced: torch could not install the shipped Dynamo cache entry: RuntimeError('1 guarded code(s)"),
    ("unique-id", "traced: torch could not install the shipped Dynamo cache entry"),
    ("graph-load", "traced: torch could not install the shipped Dynamo cache entry: RuntimeError('misbehaving on purpose')"),
    ("post-compile-graph", "served: 1 guarded code(s)"),  # it asks more of GraphLowering: the lowerings load
    ("decomp-table", "served: 1 guarded code(s)"),  # it calls the compile-only function: the tables load
    ("backend-debug", "served: 1 guarded code(s)"),  # a minifier wrapper not read here: torch's module is imported
    ("extension-paths", "served: 1 guarded code(s)"),  # include paths computed otherwise: torch's module is imported
    ("precompile-entry", None),  # a torch without precompile entries: nothing wrapped, every call torch's
])
def test_a_served_compile_whose_torch_internals_misbehave_is_traced_never_wrong(compile_build, tmp_path, broken, outcome):
    found = run_cases(compile_build / "site", tmp_path, broken, env=misbehaving(broken, compile_build / "site"),
                      script=FIRST_CALL)
    assert found["diff"] < 1e-6 and found["grads"] < 1e-6
    if outcome is None:
        assert found["served"] == {} and found["traced"] >= 1
        return
    assert found["served"]["compile_pkg.model.loss_fn"].startswith(outcome), found["served"]
    assert (found["traced"] == 0) == outcome.startswith("served")
    if broken == "post-compile-graph":
        assert {"torch._inductor.lowering", "torch._inductor.debug"} <= set(found["lowerings"]), found
    if broken == "backend-debug":
        assert "torch._dynamo.repro.after_dynamo" in found["lowerings"], found
    if broken == "extension-paths":
        assert "torch.utils.cpp_extension" in found["lowerings"], found
    if broken == "decomp-table":
        assert "torch._inductor.decomposition" in found["lowerings"], found


OPTIMIZER_STEP = r"""
import json, torch
from compile_pkg import styles as S
from torch._dynamo.utils import get_compilation_metrics
from hatch_precompile.run.served import served_compile
out = S.trained_by_compiled_step(0)
print(json.dumps({"out": out, "served": served_compile.served(), "traced": sum(1 for m in get_compilation_metrics() if m.co_name)}))
"""


def test_a_compiled_optimizer_step_whose_state_cannot_be_made_is_traced_never_wrong(compile_build, tmp_path):
    """optimizer-init: the optimizer's ``_init_group`` fails when hatch-precompile calls it (torch's trace
    still can): the step's first call is traced, and computes what the served one does (a cold
    compile's: the cases above)."""
    site = compile_build / "site"
    runs = {}
    for name, env in (("served", {}), ("broken", misbehaving("optimizer-init", site))):
        (tmp_path / name).mkdir()
        proc = run([sys.executable, "-c", OPTIMIZER_STEP], cwd=tmp_path / name,
                   env={"PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / name / "cache"), **env})
        runs[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    step = "compile_pkg.styles.trained_by_compiled_step.<locals>.step"
    assert runs["served"]["traced"] == 0 and runs["served"]["served"][step].startswith("served: 3 guarded code(s), ")
    assert " call(s) traced here: " not in runs["served"]["served"][step], runs["served"]
    assert runs["broken"]["traced"] >= 1 and " call(s) traced here: " in runs["broken"]["served"][step], runs["broken"]
    assert runs["broken"]["out"] == pytest.approx(runs["served"]["out"], rel=1e-6, abs=1e-7)
