"""Exported steps serve the weights users load: real models, in every state a user holds them.

tests/serve_pkg is built once (a transformers BERT classifier with a padding mask, 3 classes; a
convnet with BatchNorm and a 5-class head: both heads' biases are small enough that Inductor would
fold them into the code). A fresh process then serves them as a server and a library user would,
each with other weights than the build's, and every call must take the shipped route with eager's
outputs, without one warning. Then the refusals: what the trace read, changed, refuses with the
field and both values, warned once per kind; what it never read does not refuse.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run

pytestmark = pytest.mark.slow

STATES = r'''
import json, sys, tempfile, warnings
warnings.simplefilter("always")
import torch
import serve_pkg
from serve_pkg import bert_step, classify, convnet_step, make_bert, make_convnet, predict
from serve_pkg.model import requests
out = {}
def served(name, step, fn, model, *inputs):
    with torch.no_grad():
        got = step(model, *inputs)
        want = fn(model, *inputs)
    out[name] = [step.route, step.reason, (got - want).abs().max().item()]
ids, mask = requests(3, 40)  # shapes the workload never used
caught = warnings.catch_warnings(record=True)
seen = caught.__enter__()
# A server: a checkpoint saved with save_pretrained, other weights (every bias too) than the build's.
other = make_bert(seed=7)
with torch.no_grad():
    for name, p in other.named_parameters():
        if name.endswith("bias"):
            p.normal_()
directory = tempfile.mkdtemp()
other.save_pretrained(directory)
from transformers import BertForSequenceClassification
loaded = BertForSequenceClassification.from_pretrained(directory)
served("bert from_pretrained", bert_step, classify, loaded.eval(), ids, mask)
out["bert loaded is not the build's"] = (loaded.classifier.bias - make_bert().classifier.bias).abs().max().item()
# A library user: constructed fresh and never called (config.problem_type still None).
served("bert fresh", bert_step, classify, make_bert(seed=3), ids, mask)
# After fine-tuning: a few AdamW steps with labels, then eval().
tuned = make_bert(seed=4).train()
optimizer = torch.optim.AdamW(tuned.parameters(), lr=1e-2)
for _ in range(3):
    tuned(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 2, 1])).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
served("bert fine-tuned", bert_step, classify, tuned.eval(), ids, mask)
# Fields the trace never read, changed: still served.
loaded.config._name_or_path = "elsewhere"
loaded.config.problem_type = "multi_label_classification"
served("bert unread fields changed", bert_step, classify, loaded, ids, mask)
# A convnet whose BatchNorm statistics come from a checkpoint.
images = torch.randn(7, 3, 16, 16)
trained = make_convnet(seed=5).train()
with torch.no_grad():
    for _ in range(5):
        trained(torch.randn(8, 3, 16, 16) * 2 + 1)  # running statistics move
    trained.head.bias.normal_()
    trained.temperature.fill_(0.5)
path = tempfile.mktemp(suffix=".pt")
torch.save(trained.state_dict(), path)
convnet = make_convnet()
convnet.load_state_dict(torch.load(path, weights_only=True))
served("convnet checkpoint", convnet_step, predict, convnet.eval(), images)
with torch.no_grad():  # in place, after a first call
    convnet.features[1].running_var.mul_(3)
    convnet.head.bias.add_(1)
served("convnet in place", convnet_step, predict, convnet, images)
out["warnings while served"] = [str(w.message) for w in seen if w.category.__name__ == "PrecompileWarning"]
# What the trace read, changed in place after a first call: refused, warned once per kind.
del seen[:]
loaded.config.output_hidden_states = True
served("bert read field changed", bert_step, classify, loaded, ids, mask)
loaded.config.output_hidden_states = False
convnet.features[1].eps = 1e-2
served("convnet eps changed", convnet_step, predict, convnet, images)
served("convnet eps changed again", convnet_step, predict, convnet, images)
convnet.features[1].eps = 1e-5
convnet.train()
served("convnet train mode", convnet_step, predict, convnet, images)
convnet.eval()
served("convnet back", convnet_step, predict, convnet, images)
handle = convnet.head.register_forward_hook(lambda module, args, output: output * 2)  # after a first call
served("convnet hooked", convnet_step, predict, convnet, images)
handle.remove()
out["warnings when refused"] = [str(w.message) for w in seen if w.category.__name__ == "PrecompileWarning"]
caught.__exit__(None, None, None)
warnings.simplefilter("error")  # a warning never raises: the call still falls back
served("convnet under -W error", convnet_step, predict, convnet, torch.randn(40, 3, 16, 16))
out["compiler imported by the shipped route"] = sorted(
    m for m in sys.modules if m.split(".")[:2] in (["torch", "_inductor"],))
print(json.dumps(out))
'''


def test_real_models_serve_the_weights_users_load_and_refuse_only_what_the_trace_read(serve_site, tmp_path):
    (tmp_path / "cache").mkdir()
    proc = run([sys.executable, "-c", STATES], cwd=tmp_path, env={
        "PYTHONPATH": str(serve_site), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
        "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["bert loaded is not the build's"] > 0.1
    for state in ("bert from_pretrained", "bert fresh", "bert fine-tuned", "bert unread fields changed",
                  "convnet checkpoint", "convnet in place", "convnet back"):
        route, reason, error = out[state]
        assert route == "aotinductor" and reason is None and error < 1e-4, (state, out[state])
    assert out["warnings while served"] == []
    route, reason, error = out["bert read field changed"]
    assert route == "fallback" and error < 1e-4
    assert reason.startswith("argument 0's config.output_hidden_states: False at build, True now"), reason
    route, reason, error = out["convnet eps changed"]
    assert route == "fallback" and reason.startswith("argument 0's features.1.eps: 1e-05 at build, 0.01 now")
    assert out["convnet eps changed again"][0] == "fallback"
    assert out["convnet train mode"][:2] == ["fallback", "argument 0 is in train() mode; the step was exported in eval()"]
    route, reason, error = out["convnet hooked"]  # the hook ran: eager's output, not the package's
    assert route == "fallback" and reason.startswith("argument 0's hooks changed since it was checked") and error < 1e-4
    # One warning per step and kind, naming the package, the step, the reason and the fix; none for
    # the second refusal of a kind, none for train mode (the author planned it).
    warned = out["warnings when refused"]
    assert len(warned) == 2, warned
    assert warned[0].startswith("hatch-precompile: serve_pkg's step 'bert' ran its fallback instead of its shipped "
                                "step: argument 0's config.output_hidden_states: False at build, True now")
    assert ("Its fallback is torch.compile(fn): warm from the shipped caches where the package's workload made that "
            "call, compiled otherwise.") in warned[0]  # what really happens, whichever it is
    assert "To use the shipped step, serve the model with the settings the step's trace read" in warned[0]
    assert warned[1].startswith("hatch-precompile: serve_pkg's step 'convnet' ran its fallback")
    assert "features.1.eps: 1e-05 at build, 0.01 now" in warned[1]
    route, reason, error = out["convnet under -W error"]
    assert route == "fallback" and reason.startswith("input 0: dim 0 is 40, outside the exported range 1..32")
    assert error < 1e-4


FINE_TUNE = r'''
import copy, json, sys, warnings
warnings.simplefilter("always")
import torch
from serve_pkg.model import bert_loss, bert_loss_step, make_bert, requests
model = make_bert(seed=5, dropout=0.0).train()  # another init than the build's, as a script builds it
eager = copy.deepcopy(model)
batches = [(*requests(3, 40), torch.tensor([0, 2, 1])), (*requests(5, 17, seed=2), torch.tensor([1, 1, 0, 2, 2])),
           (*requests(2, 64, seed=3), torch.tensor([2, 0]))]  # padded, none of the workload's shapes
out = {"routes": [], "loss": [], "grads close": []}
def compiler():
    return {m for m in sys.modules if m.startswith(("torch._dynamo", "torch._inductor"))}
def kernels():
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    import pathlib
    return len(list(pathlib.Path(cache_dir()).rglob("*.so")))
before = compiler()  # transformers' own imports load Dynamo: what the step adds is counted
kernels_before = kernels()
with warnings.catch_warnings(record=True) as seen:
    for step, (ids, mask, labels) in enumerate(batches * 3):
        loss = bert_loss_step(model, ids, mask, labels)
        if step == 0:  # before any optimizer (torch's optimizers import Dynamo too)
            out["compiler"] = sorted(compiler() - before)
            optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager)]
        want = bert_loss(eager, ids, mask, labels)
        want.backward()
        out["routes"].append(bert_loss_step.route)
        out["loss"].append(abs(loss.item() - want.item()))
        out["grads close"].append(all(torch.allclose(p.grad, q.grad, rtol=1e-3, atol=1e-4)
                                      for p, q in zip(model.parameters(), eager.parameters())))
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
out["params"] = max((p - q).abs().max().item() for p, q in zip(model.parameters(), eager.parameters()))
from torch._dynamo.utils import counters
out["frames"] = sum(counters["frames"].values())
out["kernels built"] = kernels() - kernels_before
out["warnings"] = [str(w.message) for w in seen if "hatch-precompile" in str(w.message)]
print(json.dumps(out))
'''


def test_bert_fine_tunes_through_its_exported_loss_step_as_eager(serve_site, tmp_path):
    """transformers' BERT (SDPA attention, a padding mask): the loss's forward and backward run
    shipped with another init and other shapes, 9 SGD steps stay with eager, nothing compiles."""
    (tmp_path / "cache").mkdir()
    proc = run([sys.executable, "-c", FINE_TUNE], cwd=tmp_path, env={
        "PYTHONPATH": str(serve_site), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path)})
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["routes"] == ["aotinductor"] * 9 and out["warnings"] == [], out
    assert out["compiler"] == [] and out["frames"] == 0 and out["kernels built"] == 0
    assert max(out["loss"]) < 1e-5 and all(out["grads close"]), out
    assert out["params"] < 1e-4


def test_the_contract_holds_what_the_trace_read_and_no_module_tensor_is_in_the_code(serve_site):
    sets = serve_site / "serve_pkg" / "_precompiled"
    (manifest_path,) = (sets / "sets").glob("*/manifest.json")
    manifest = json.loads(manifest_path.read_text())

    def contract(name: str) -> dict:
        return json.loads((sets / "blobs" / manifest["files"][f"steps/{name}.json"]["sha256"]).read_text())

    bert = contract("bert")
    assert bert["format"] == 2
    module = bert["export"]["modules"]["0"]
    read = {".".join(filter(None, r[:3])): r[3] for r in module["reads"]}
    assert read["config.output_hidden_states"] == "False" and read["config._attn_implementation"] == "'sdpa'"
    assert not [name for name in read if "problem_type" in name or "name_or_path" in name], read
    assert "baked" not in module and "repr" not in json.dumps(module["structure"])
    # Every tensor of both models is a constant the caller binds: the heads' biases (3 and 5) too.
    constants = set(bert["export"]["constants"])
    assert {"arg0.classifier.bias", "arg0.classifier.weight"} <= constants
    convnet = contract("convnet")["export"]
    assert {"arg0.head.bias", "arg0.temperature", "arg0.features.1.running_mean",
            "arg0.features.1.running_var"} <= set(convnet["constants"])
    assert [r[2] for r in convnet["modules"]["0"]["reads"] if r[0] == "features.1"] == ["eps"]  # not momentum


def _folded_build(tmp_path: Path) -> str:
    """What exporting a small MLP says when the compile may fold small tensors into the code."""
    code = (
        "import torch, tempfile\nfrom torch import nn\nfrom pathlib import Path\n"
        "from hatch_precompile.builder.steps import export\nfrom hatch_precompile.run.torch_internals.steps import aoti\n"
        "aoti.KEEP_CONSTANTS.clear()  # as a torch that folds small tensors into the code\n"
        "m = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3)).eval()\n"
        "try:\n    with torch.no_grad():\n"
        "        export.save('serve', lambda m, x: m(x), (m, torch.randn(2, 4)), None, 'eager', Path(tempfile.mkdtemp()))\n"
        "except ValueError as exc:\n    print(exc)\n"
    )
    return run([sys.executable, "-c", code], cwd=tmp_path).stdout.strip().splitlines()[-1]


def test_a_build_whose_package_folds_a_module_tensor_into_its_code_fails_naming_it(tmp_path):
    said = _folded_build(tmp_path)
    # Inductor folds 1-D tensors of up to 8 elements: every bias and the LayerNorm's weight here.
    assert said == ("step 'serve': the AOTInductor package holds these module tensors in its code, not as constants "
                    "the caller binds: argument 0's 0.bias, argument 0's 1.bias, argument 0's 1.weight, argument 0's "
                    "2.bias. A caller's other values would not be seen, so it is not shipped")


TRAIN_WITH_BACKWARD_INSIDE = r'''
import copy, json, pathlib
import torch
from torch._inductor.runtime.cache_dir_utils import cache_dir
from serve_pkg.model import bert_loss, compiled_training_step, make_bert, requests
model = make_bert(seed=5, dropout=0.0).train()  # another init and other tokens than the build's, its shapes
eager = copy.deepcopy(model)
ids, mask = requests(4, 24, seed=2)
labels = torch.tensor([2, 0, 1, 1])
shipped = len(list(pathlib.Path(cache_dir()).rglob("*.so")))  # load() installed them at import
loss = compiled_training_step()(model, ids, mask, labels)
want = bert_loss(eager, ids, mask, labels)
want.backward()
from torch._dynamo.utils import counters, get_compilation_metrics
print(json.dumps({
    "aot": dict(counters["aot_autograd"]), "fx": {k: v for k, v in counters["inductor"].items() if "cache" in k},
    "graphs": sorted(m.co_name for m in get_compilation_metrics() if m.co_name and m.graph_op_count),
    "kernels built": len(list(pathlib.Path(cache_dir()).rglob("*.so"))) - shipped,
    "loss": abs(loss.item() - want.item()),
    "grads close": all(torch.allclose(p.grad, q.grad, rtol=1e-3, atol=1e-4)
                       for p, q in zip(model.parameters(), eager.parameters()) if q.grad is not None)}))
'''


def test_a_training_step_with_backward_inside_is_served_every_graph(serve_site, tmp_path):
    """transformers' BERT trained by a torch.compile'd step that calls loss.backward() inside, as
    most users' first compile does: Dynamo breaks the graph at backward(), and both graphs, the
    one after the break (nothing to compute: ``return loss.detach()``) included, come from the
    shipped caches; nothing compiles, and the loss and gradients are eager's."""
    (tmp_path / "cache").mkdir()
    proc = run([sys.executable, "-c", TRAIN_WITH_BACKWARD_INSIDE], cwd=tmp_path, env={
        "PYTHONPATH": str(serve_site), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path)})
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    first, after_the_break = out["graphs"]
    assert first == "bert_training_step" and after_the_break.startswith("torch_dynamo_resume_in_bert_training_step")
    assert out["aot"].get("autograd_cache_hit") == 2 and not out["aot"].get("autograd_cache_miss"), out
    assert not out["fx"].get("fxgraph_cache_miss") and out["kernels built"] == 0, out
    assert out["loss"] < 1e-5 and out["grads close"], out
