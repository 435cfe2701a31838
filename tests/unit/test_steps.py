"""save_step / load_step in-process: the contract a captured step keeps, the build's check, its errors."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from torch import nn

from hatch_precompile.builder.steps import step_capture, step_check
from hatch_precompile.errors import LoaderCrashed, NotAvailable, StepCaptureError, StepMismatch
from hatch_precompile.protocol import STEPS_DIR_VAR
from hatch_precompile.run.steps import call_contract, shipped_steps


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.0), nn.LayerNorm(8), nn.Linear(8, 2))


def batch(n: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(n, 4, generator=generator), torch.randint(0, 2, (n,), generator=generator)


def training_step(m, x, y, scale=1.0):
    loss = nn.functional.cross_entropy(m(x) * scale, y)
    loss.backward()
    return loss.detach()


def contract(*args) -> dict:
    return {"modes": call_contract.process_modes(), "args": call_contract.describe(args)}


def test_the_same_arguments_keep_the_contract_and_other_weights_too():
    m, (x, y) = model(), batch()
    captured = contract(m, x, y, 1.0)
    assert call_contract.mismatch(captured, (m, x, y, 1.0)) is None
    other = model()
    with torch.no_grad():
        other[0].weight.add_(1.0)  # other values, the same structure: the intended use
    assert call_contract.mismatch(captured, (other, *batch(), 1.0)) is None


@pytest.mark.parametrize("change, says", [
    (lambda m, x, y, s: (m, *batch(5), s), "argument 1 differs from the capture's: {\"tensor\": [[5, 4]"),
    (lambda m, x, y, s: (m, x.double(), y, s), "argument 1 differs"),
    (lambda m, x, y, s: (m, x.t().contiguous().t(), y, s), "argument 1 differs"),
    (lambda m, x, y, s: (m, x, y, 2.0), "argument 3 differs from the capture's: {\"value\": [\"float\", \"2.0\"]}"),
    (lambda m, x, y, s: (m, x, y, 1), "argument 3 differs"),
    (lambda m, x, y, s: (m.eval(), x, y, s), "argument 0 differs from the capture's: a train()/eval() mode"),
    (lambda m, x, y, s: (m.requires_grad_(False), x, y, s), "its parameters or buffers"),
    (lambda m, x, y, s: (m.double(), x, y, s), "its parameters or buffers"),
    (lambda m, x, y, s: (nn.Sequential(*m[:3], nn.Linear(8, 3)), x, y, s), "its submodules or their settings"),
    (lambda m, x, y, s: (m, x, y), "called with 3 arguments, captured with 4"),
    (lambda m, x, y, s: (m, [x], y, s), "a list where the capture had a tensor"),
    (lambda m, x, y, s: (m, x, y, object()), "argument 3 is a object"),
])
def test_a_broken_contract_is_named(change, says):
    m, (x, y) = model(), batch()
    captured = contract(m, x, y, 1.0)
    assert says in call_contract.mismatch(captured, change(m, x, y, 1.0))


def test_a_changed_submodule_setting_breaks_the_contract():
    m, (x, y) = model(), batch()
    captured = contract(m, x, y)
    m[1].p = 0.5  # the trace baked dropout's p in; nothing in the tensors shows it
    assert "its submodules or their settings" in call_contract.mismatch(captured, (m, x, y))


def test_the_process_modes_are_part_of_the_contract():
    m, (x, y) = model(), batch()
    captured = contract(m, x, y)
    with torch.no_grad():
        assert "the process modes" in call_contract.mismatch(captured, (m, x, y))
    with torch.autocast("cpu"):
        assert "the process modes" in call_contract.mismatch(captured, (m, x, y))


def test_containers_and_values_are_described_to_the_leaf():
    described = call_contract.describe(({"b": torch.zeros(2), "a": (1, "x", None)},))
    assert described == [{"dict": {
        "a": {"tuple": [{"value": ["int", "1"]}, {"value": ["str", "'x'"]}, {"value": ["NoneType", "None"]}]},
        "b": {"tensor": [[2], [1], "torch.float32", "cpu", False]},
    }}]
    with pytest.raises(TypeError, match=r"argument 0\[1\] is a set"):
        call_contract.describe(([1, {2}],))


def test_changed_arguments_differ_from_the_originals_which_stay_as_they_were():
    m, (x, _) = model(), batch(32)
    ids, mask, ones = torch.arange(32) % 5, torch.ones(64, dtype=torch.bool), torch.ones(4, 16, dtype=torch.long)
    originals = [m[0].weight.clone(), x.clone(), ids.clone(), mask.clone(), ones.clone()]
    cm, cx, cids, cmask, cones = step_check.changed_copies((m, x, ids, mask, ones))
    assert not torch.equal(cm[0].weight, originals[0]) and not torch.equal(cx, originals[1])
    assert sorted(cids.tolist()) == sorted(ids.tolist()) and not torch.equal(cids, ids)  # shuffled: in range
    assert not cmask.all() and cmask.any()  # masks: some entries flipped, as padding would
    assert set(cones.unique().tolist()) == {0, 1} and cones.dtype == torch.long
    for now, was in zip((m[0].weight, x, ids, mask, ones), originals):
        assert torch.equal(now, was)
    again = step_check.changed_copies((m, x, ids, mask, ones))  # the same change every time: both runs compare alike
    assert torch.equal(again[1], cx) and torch.equal(again[4], cones)


def test_the_check_accepts_a_faithful_step():
    m, (x, y) = model(), batch()
    step_capture.check_against_reference("train", training_step, (m, x, y), training_step, "eager")


def test_the_check_catches_a_step_that_baked_in_a_weight():
    m, (x, y) = model(), batch()
    frozen = model()  # what a trace that read a weight outside its arguments would compute

    def baked(m_, x_, y_):
        loss = nn.functional.cross_entropy(frozen(x_), y_)
        loss.backward()
        return loss.detach()

    with pytest.raises(StepMismatch, match=r"step 'train': the captured step computes something else "
                                                 r"than training_step run eagerly .*the result"):
        step_capture.check_against_reference("train", training_step, (m, x, y), baked, "eager")


def test_the_check_catches_a_branch_the_changed_inputs_take_otherwise():
    m, (x, y) = model(), batch(8)
    first = int(y[0])

    def branched(m_, x_, y_):  # a trace follows the example's branch, whatever the input
        return m_(x_ if first == 0 else -x_).sum().detach()

    def step(m_, x_, y_):
        return m_(x_ if y_[0] == 0 else -x_).sum().detach()

    flipped = [labels for labels in (torch.tensor([0] + [2] * 7), torch.tensor([2] + [0] * 7), torch.arange(8) % 3)
               if step_check.changed_copies((m, x, labels))[2][0] != labels[0]]
    assert flipped  # the shuffle moves the first label for some of these
    for labels in flipped:
        first = int(labels[0])
        with pytest.raises(StepMismatch):
            step_capture.check_against_reference("branch", step, (m, x, labels), branched, "eager")


def test_the_check_catches_missing_gradients():
    m, (x, y) = model(), batch()

    def no_backward(m_, x_, y_):
        return nn.functional.cross_entropy(m_(x_), y_).detach()

    with pytest.raises(StepMismatch, match="the gradient of 0.weight is NoneType, expected Tensor"):
        step_capture.check_against_reference("train", training_step, (m, x, y), no_backward, "eager")


def test_save_step_outside_a_build_does_nothing(monkeypatch):
    monkeypatch.delenv(STEPS_DIR_VAR, raising=False)
    calls = []
    assert step_capture.save_step("train", lambda *args: calls.append(args), *model(), *batch()) is None
    assert calls == []  # neither captured nor checked: the workload runs by hand as it is


def test_the_check_catches_a_result_that_lost_its_gradient():
    m, (x, y) = model(), batch()

    def loss(m_, x_, y_):  # the user calls backward() on what the step returns
        return nn.functional.cross_entropy(m_(x_), y_)

    with pytest.raises(StepMismatch, match=r"the result needs gradients from \S*loss but does not from the "
                                                 r"captured step \(call backward\(\) inside the step\)"):
        step_capture.check_against_reference("loss", loss, (m, x, y), lambda *a: loss(*a).detach(), "eager")


def test_module_attributes_config_and_hooks_are_in_the_contract():
    class Attention(nn.Module):
        def __init__(self, heads):
            super().__init__()
            self.heads, self.proj = heads, nn.Linear(8, 8)  # repr does not show heads

        def forward(self, x):
            return self.proj(x).view(x.shape[0], self.heads, -1).softmax(-1).flatten(1)

    x = torch.randn(2, 8)
    captured = contract(Attention(2), x)
    assert call_contract.mismatch(captured, (Attention(2), x)) is None
    assert "its submodules' attributes, config or hooks" in call_contract.mismatch(captured, (Attention(4), x))
    hooked = Attention(2)
    hooked.register_forward_hook(lambda *a: None)
    assert "its submodules' attributes, config or hooks" in call_contract.mismatch(captured, (hooked, x))

    class Config:
        def __init__(self, n):
            self.n = n

        def to_dict(self):
            return {"n": self.n}

    with_config = Attention(2)
    with_config.config = Config(1)
    captured = contract(with_config, x)
    with_config.config = Config(2)
    assert "config" in call_contract.mismatch(captured, (with_config, x))


def test_a_module_that_cannot_be_described_falls_back_instead_of_raising():
    class Broken(nn.Linear):
        def extra_repr(self):
            raise RuntimeError("no repr today")

    x = torch.randn(2, 4)
    captured = contract(nn.Linear(4, 4), x)
    assert "could not be described: RuntimeError('no repr today')" in call_contract.mismatch(captured, (Broken(4, 4), x))


def test_a_step_saved_twice_under_one_name_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv(STEPS_DIR_VAR, str(tmp_path))
    (tmp_path / "train.json").write_text("{}")
    with pytest.raises(ValueError, match=r"save_step\('train', \.\.\.\): a step named 'train' was already saved"):
        step_capture.save_step("train", training_step, *batch())


@pytest.mark.skipif(hasattr(torch.compiler, "precompile"), reason="this torch can capture")
def test_save_step_on_a_torch_without_precompile_says_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(STEPS_DIR_VAR, str(tmp_path / "steps"))
    m, (x, y) = model(), batch()
    assert step_capture.save_step("train", training_step, m, x, y) is None
    assert "step 'train' not captured" in capsys.readouterr().out
    assert not (tmp_path / "steps").exists()


def test_bad_names_and_options_are_named():
    with pytest.raises(ValueError, match=r"step name '\.\./x' must be"):
        step_capture.save_step("../x", training_step)
    with pytest.raises(ValueError, match=r"save_step\('t', \.\.\.\): check='exact' must be one of eager, compile"):
        step_capture.save_step("t", training_step, check="exact")
    with pytest.raises(TypeError, match=r"load_step\('pkg', 't', fn\): fn must be callable"):
        shipped_steps.load_step("pkg", "t", 3)


def test_a_step_of_a_package_without_artifacts_runs_the_fallback():
    calls = []
    step = shipped_steps.load_step("no_such_package_here", "train", training_step,
                           fallback=lambda *args, **kwargs: calls.append(args) or "fell back")
    assert step.route is None
    m, (x, y) = model(), batch()
    assert step(m, x, y) == "fell back" and len(calls) == 1
    assert step.route == "fallback" and "not in use" in step.reason
    assert step(m, x=x, y=y) == "fell back" and calls[-1] == (m,)
    assert step.reason == "called with keyword arguments (x, y)"


def branch_on_value(m, x):
    return m(x) if x.sum() > 0 else -m(x)  # data-dependent control flow: no export traces it


def test_an_inference_step_that_cannot_be_exported_fails_naming_step_route_and_reason(monkeypatch, tmp_path):
    monkeypatch.setenv(STEPS_DIR_VAR, str(tmp_path / "steps"))
    m, (x, _) = model().eval(), batch()
    with torch.no_grad(), pytest.raises(StepCaptureError) as raised:
        step_capture.save_step("serve", branch_on_value, m, x)
    message = str(raised.value)
    assert message.startswith(f"step 'serve' (aotinductor route): torch {torch.__version__} could not capture it: ")
    assert "data-dependent" in message.lower() and 'on_failure="warn"' in message
    assert not (tmp_path / "steps" / "serve.json").exists()


def test_on_failure_warn_ships_the_package_without_the_step(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(STEPS_DIR_VAR, str(tmp_path / "steps"))
    m, (x, _) = model().eval(), batch()
    with torch.no_grad():
        assert step_capture.save_step("serve", branch_on_value, m, x, on_failure="warn") is None
    said = capsys.readouterr().out
    assert "precompile: warning: step 'serve' (aotinductor route) not shipped: torch " in said
    assert "load_step() falls back to torch.compile" in said


def test_a_training_step_torch_cannot_capture_names_the_step_and_what_to_do(monkeypatch, tmp_path):
    """The training route's own failure (transformers' ``padding_mask.all()`` under
    torch.compiler.precompile raises a bare RuntimeError on torch 2.14): named, with the way out."""
    def precompile(*args, **kwargs):
        raise RuntimeError("Could not guard on data-dependent expression Eq(u0, 1)")

    monkeypatch.setattr(torch.compiler, "precompile", precompile, raising=False)
    monkeypatch.setenv(STEPS_DIR_VAR, str(tmp_path / "steps"))
    m, (x, y) = model(), batch()
    with pytest.raises(StepCaptureError, match=r"step 'train' \(precompile route\): torch \S+ could not "
                       r"capture it: RuntimeError: Could not guard on data-dependent expression Eq\(u0, 1\)\. The "
                       r"training route traces the whole step.*under torch.no_grad\(\) with the model in eval\(\)"):
        step_capture.save_step("train", training_step, m, x, y)


def test_dynamic_shapes_are_checked_against_the_step(monkeypatch, tmp_path):
    monkeypatch.setenv(STEPS_DIR_VAR, str(tmp_path / "steps"))
    m, (x, y) = model(), batch()
    with pytest.raises(ValueError, match=r"dynamic_shapes is for an exported step: save it under torch.no_grad\(\)"):
        step_capture.save_step("train", training_step, m, x, y, dynamic_shapes=(None, {0: 8}, None))
    m.eval()
    with torch.no_grad():
        with pytest.raises(ValueError, match=r"dynamic_shapes must have one entry per argument of forward \(2\)"):
            step_capture.save_step("serve", lambda_free_forward, m, x, dynamic_shapes=({0: 8},))
        with pytest.raises(ValueError, match=r"dynamic_shapes\[0\] must be None: argument 0 is a module"):
            step_capture.save_step("serve", lambda_free_forward, m, x, dynamic_shapes=({0: 8}, None))
        with pytest.raises(ValueError, match=r"dynamic_shapes names y, which are not arguments of forward \(m, x\)"):
            step_capture.save_step("serve", lambda_free_forward, m, x, dynamic_shapes={"y": None})
    with pytest.raises(ValueError, match=r"on_failure='skip' must be one of error, warn"):
        step_capture.save_step("serve", lambda_free_forward, m, x, on_failure="skip")


def lambda_free_forward(m, x):
    return m(x)


lambda_free_forward.__qualname__ = "forward"


def test_a_training_step_saved_without_grad_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv(STEPS_DIR_VAR, str(tmp_path / "steps"))
    m, (x, y) = model(), batch()
    with torch.no_grad(), pytest.raises(ValueError, match=r"save_step\('train', \.\.\., backward=True\): save a "
                                                          r"training step with grad enabled"):
        step_capture.save_step("train", lambda m_, x_, y_: nn.functional.cross_entropy(m_(x_), y_), m, x, y, backward=True)


def branching_loss(m, x, y):
    logits = m(x)
    if logits.sum() > 0:  # data-dependent control flow: no export traces it
        logits = -logits
    return nn.functional.cross_entropy(logits, y)


def test_a_training_step_torch_cannot_export_is_not_shipped_and_the_build_says_where(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(STEPS_DIR_VAR, str(tmp_path / "steps"))
    monkeypatch.delattr(torch.compiler, "precompile", raising=False)
    m, (x, y) = model(), batch()
    assert step_capture.save_step("train", branching_loss, m, x, y, backward=True, on_failure="warn") is None
    said = capsys.readouterr().out
    assert f"step 'train' (aotinductor route, forward and backward): torch {torch.__version__} could not export it " \
           f"at {__file__}:" in said
    assert "load_step() runs torch.compile and backward()" in said
    assert not (tmp_path / "steps").exists()


def plain_loss(m, x, y):
    return nn.functional.cross_entropy(m(x), y)


def loss_routes(monkeypatch, tmp_path, export_error: Exception, precompile_error: Exception | None) -> None:
    """The loss step's two routes, made to fail as told (no compile: the unit tier stays fast)."""
    from hatch_precompile.builder.steps import export

    def save(*args, **kwargs):
        raise export_error

    monkeypatch.setattr(export, "save", save)
    if precompile_error is None:
        monkeypatch.delattr(torch.compiler, "precompile", raising=False)
    else:
        def precompile(*args, **kwargs):
            raise precompile_error

        monkeypatch.setattr(torch.compiler, "precompile", precompile, raising=False)
    monkeypatch.setenv(STEPS_DIR_VAR, str(tmp_path / "steps"))


def test_a_loss_either_route_captures_wrongly_fails_the_build_naming_both_routes(monkeypatch, tmp_path, capsys):
    """on_failure="error": a loss a route captured wrongly fails the build; one torch cannot capture
    by either route ships its warm fallback (torch 2.8.0 refuses sample_pkg's dynamic batch in the
    joint graph: failing there failed a user's install)."""
    mismatch = StepMismatch("step 'train': the captured step computes something else")
    loss_routes(monkeypatch, tmp_path, RuntimeError("data-dependent branch"), mismatch)
    m, (x, y) = model(), batch()
    with pytest.raises(StepMismatch, match=r"step 'train' \(a loss, backward=True\) can be shipped by neither "
                       r"route: aotinductor route \(forward and backward\): torch \S+ could not export it at \S+: "
                       r"RuntimeError: data-dependent branch; precompile route: step 'train': the captured step "
                       r"computes something else\. .*on_failure=\"warn\""):
        step_capture.save_step("train", plain_loss, m, x, y, backward=True)
    loss_routes(monkeypatch, tmp_path, RuntimeError("data-dependent branch"), RuntimeError("cannot guard on u0"))
    assert step_capture.save_step("train", plain_loss, m, x, y, backward=True) is None
    loss_routes(monkeypatch, tmp_path, RuntimeError("SymIntArrayRef expected to contain only concrete integers"), None)
    assert step_capture.save_step("train", plain_loss, m, x, y, backward=True) is None  # a torch before 2.14
    said = capsys.readouterr().out
    assert "could not capture it either: RuntimeError: cannot guard on u0; load_step() runs torch.compile" in said
    assert "SymIntArrayRef expected to contain only concrete integers; load_step() runs torch.compile" in said
    assert not (tmp_path / "steps").exists()


def test_a_loss_neither_route_ships_with_on_failure_warn_is_noted(monkeypatch, tmp_path, capsys):
    loss_routes(monkeypatch, tmp_path, RuntimeError("data-dependent branch"), RuntimeError("cannot guard on u0"))
    m, (x, y) = model(), batch()
    assert step_capture.save_step("train", plain_loss, m, x, y, backward=True, on_failure="warn") is None
    said = capsys.readouterr().out
    assert "precompile: warning: step 'train' (aotinductor route, forward and backward): torch " in said
    assert "capturing it with torch.compiler.precompile instead" in said
    assert ("precompile: warning: step 'train' (precompile route): torch " in said
            and "could not capture it either: RuntimeError: cannot guard on u0; load_step() runs torch.compile and "
                "backward()" in said)


def test_a_torch_that_lacks_the_loss_routes_only_notes_even_with_on_failure_error(monkeypatch, tmp_path, capsys):
    from hatch_precompile.builder.steps import export_proof
    from hatch_precompile.child import package_proof

    def crashed(*args, **kwargs):  # the loader took its prover down: this torch lacks the route here
        raise LoaderCrashed("crashed (SIGSEGV)", {"torch": torch.__version__, "device": "cpu"}, "")

    monkeypatch.setattr(package_proof, "prove", crashed)
    with pytest.raises(NotAvailable, match=r"loader crashed \(SIGSEGV\) opening and running") as crash:
        export_proof.proven_in_child("train", b"", {}, [])
    loss_routes(monkeypatch, tmp_path, crash.value, None)
    m, (x, y) = model(), batch()
    assert step_capture.save_step("train", plain_loss, m, x, y, backward=True) is None
    said = capsys.readouterr().out
    assert (f"precompile: warning: step 'train' not captured: {crash.value}; load_step() falls back to "
            "torch.compile and backward()") in said
    assert not (tmp_path / "steps").exists()


def test_a_training_steps_fallback_leaves_what_backward_leaves():
    m, (x, y) = model(), batch()
    eager = copy.deepcopy(m)
    step = shipped_steps.load_step("no_such_package_here", "loss", lambda m_, x_, y_: nn.functional.cross_entropy(m_(x_), y_),
                               fallback=lambda m_, x_, y_: nn.functional.cross_entropy(m_(x_), y_), backward=True)
    loss = step(m, x, y)
    want = nn.functional.cross_entropy(eager(x), y)
    want.backward()
    assert step.route == "fallback" and not loss.requires_grad and torch.equal(loss, want.detach())
    for p, q in zip(m.parameters(), eager.parameters()):
        assert torch.equal(p.grad, q.grad)


def dropout_loss(m_, x_, y_):
    return nn.functional.cross_entropy(m_(x_), y_)


@pytest.mark.parametrize(("loaded", "says"), [
    (lambda *a: 1.2 * dropout_loss(*a), "its mean loss"),  # another loss, the same direction
    (lambda *a: 2 * dropout_loss(*a).detach() - dropout_loss(*a), "cosine with the reference.s -0.9"),
], ids=["another loss", "gradients reversed"])
def test_the_statistical_check_of_a_step_that_draws_random_numbers(loaded, says):
    """Dropout in a shipped step draws other numbers than eager: the same step drawing from another
    stream passes; another loss, or gradients that point elsewhere, fail by name."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    generator = torch.Generator().manual_seed(1)
    args = (m, torch.randn(64, 16, generator=generator), torch.randint(0, 4, (64,), generator=generator))
    reference = step_check.with_backward(dropout_loss)

    def other_stream(*a):
        torch.rand(7)  # the same step, its dropout masks drawn from elsewhere in the stream
        return reference(*a)

    step_check.check_statistically("drop", reference, other_stream, args)
    with pytest.raises(StepMismatch, match=f"step 'drop': the captured step draws random numbers.*{says}"):
        step_check.check_statistically("drop", reference, step_check.with_backward(loaded), args)
    assert all(p.grad is None for p in m.parameters()), "the check runs on copies"


class _FakeTorch:
    """A torch as proof_problem reads it: its version, CUDA toolkit and GPU name."""

    def __init__(self, version: str, cuda: str | None, gpu: str | None) -> None:
        self.__version__ = version
        self.version = type("version", (), {"cuda": cuda})
        self.cuda = type("cuda", (), {"is_available": staticmethod(lambda: gpu is not None),
                                      "get_device_name": staticmethod(lambda index=0: gpu)})


def _exported_record(device: str, proofs: list | None, torch_version: str = "2.11.0+cu130") -> dict:
    record = {"torch": torch_version, "proven": [],
              "export": {"leaves": [{"device": device}], "modules": {"0": {"tensors": {"w": [[2], [1], "f32", device, True]}}}}}
    if proofs is not None:
        record["proofs"] = proofs
    return record


def test_an_exported_step_is_opened_only_where_a_proof_holds():
    from hatch_precompile.run.steps import exported_step

    h200 = {"torch": "2.11.0+cu130", "device": "NVIDIA H200", "cuda": "13.0"}
    here = _FakeTorch("2.11.0+cu130", "13.0", "NVIDIA H200")
    assert exported_step.proof_problem(_exported_record("cuda:0", [h200]), here) is None
    other_gpu = _FakeTorch("2.11.0+cu130", "13.0", "NVIDIA H100 80GB HBM3")
    problem = exported_step.proof_problem(_exported_record("cuda:0", [h200]), other_gpu)
    assert problem == ("its package was proven to open and run on torch 2.11.0+cu130 on NVIDIA H200 (CUDA 13.0), not on "
                       "torch 2.11.0+cu130 on NVIDIA H100 80GB HBM3 (CUDA 13.0) (`hatch-precompile bake` under this torch "
                       "on such a machine proves it)")
    # A build whose prover crashed recorded no proof: nothing opens it (it is not shipped either).
    assert "proven to open and run on nothing" in exported_step.proof_problem(_exported_record("cuda:0", []), here)
    # Before proofs were recorded: a CPU package holds for its own torch and those it was proven on; a
    # CUDA package was never opened in a process of its own, and is not opened now.
    cpu = _FakeTorch("2.13.0+cpu", None, None)
    assert exported_step.proof_problem(_exported_record("cpu", None, "2.13.0+cpu"), cpu) is None
    assert "not on torch 2.13.0+cpu" in exported_step.proof_problem(_exported_record("cpu", None, "2.14.1+cu130"), cpu)
    assert "never opened in a process of its own" in exported_step.proof_problem(_exported_record("cuda:0", None), here)
    # Each proof is named once, however often the record holds it (wheels baked before it was kept once).
    twice = {"torch": "2.13.0+cpu", "device": "cpu", "cuda": None}
    newest = _FakeTorch("2.14.1+cu130", "13.0", None)
    assert exported_step.proof_problem(_exported_record("cpu", [twice, dict(twice)]), newest).startswith(
        "its package was proven to open and run on torch 2.13.0+cpu, not on torch 2.14.1+cu130 (")


# -- a step no set ships, or another set only ---------------------------------------------------


def ship_with_a_step_elsewhere(tmp_path, monkeypatch, env_here, step_in_other_set: bool) -> str:
    """A package whose set for this environment ships no step; with ``step_in_other_set``, a set
    for torch 2.99 beside it ships one named 'train'."""
    import json

    from hatch_precompile.protocol import FileEntry, Manifest, sha256, step_files
    from unit.test_install import ship

    package, manifest_file = ship(tmp_path, monkeypatch, env_here)
    if step_in_other_set:
        contract = b'{"format": 2}'
        (manifest_file.parents[2] / "blobs" / sha256(contract)).write_bytes(contract)
        other = Manifest(package, dict(env_here, torch="2.99.0+cpu"), {step_files("train")["json"]: FileEntry(
            len(contract), sha256(contract))}, steps={"train": {"route": "precompile"}})
        (manifest_file.parents[1] / "torch-2.99").mkdir()
        (manifest_file.parents[1] / "torch-2.99" / "manifest.json").write_text(json.dumps(other.to_dict()))
    return package


@pytest.fixture
def eager_fallback(monkeypatch):
    """The default fallback, torch.compile(fn), made eager: what these tests look at is said before it runs."""
    monkeypatch.setattr(torch, "compile", lambda fn, **options: fn)


def call_and_catch(step, *args):
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        step(*args)
    return [str(w.message) for w in seen if w.category.__name__ == "PrecompileWarning"]


def test_a_step_the_package_never_shipped_is_logged_not_warned(tmp_path, monkeypatch, env_here, cache, caplog,
                                                               eager_fallback):
    """Not shipping a step is the author's choice at build (which the build says): the user can do
    nothing about it, so the fallback runs without a warning, saying what it really does."""
    package = ship_with_a_step_elsewhere(tmp_path, monkeypatch, env_here, step_in_other_set=False)
    step = shipped_steps.load_step(package, "train", training_step)
    with caplog.at_level("DEBUG", logger="hatch_precompile"):
        assert call_and_catch(step, model(), *batch()) == []
    assert step.route == "fallback"
    assert step.reason == "no step named 'train' was shipped: the package's build did not save one (its output says why)"
    assert f"hatch-precompile: {package}'s step 'train' runs its fallback: {step.reason}. Its fallback is " \
           "torch.compile(fn): warm from the shipped caches where the package's workload made that call, compiled " \
           "otherwise." in caplog.messages


def test_a_step_shipped_for_another_set_only_warns_naming_it(tmp_path, monkeypatch, env_here, cache, eager_fallback):
    """The environment decides, and the user may change it: said once, with the set that has the step."""
    package = ship_with_a_step_elsewhere(tmp_path, monkeypatch, env_here, step_in_other_set=True)
    step = shipped_steps.load_step(package, "train", training_step)
    (warned,) = call_and_catch(step, model(), *batch())
    assert step.route == "fallback"
    assert step.reason == (
        "no step named 'train' was shipped for this environment's artifact set ('test-set'); it was shipped for the "
        f"set 'torch-2.99' (built for torch='2.99.0+cpu', this environment has torch={env_here['torch']!r})")
    assert warned == f"hatch-precompile: {package}'s step 'train' runs its fallback: {step.reason}. " + shipped_steps.FALLBACK_DOES
    assert call_and_catch(step, model(), *batch()) == []  # once


def test_the_build_says_which_declared_steps_the_workload_never_saved(eager_fallback):
    """In the build's child: load_step declared them, save_step never named them. Whether the
    workload called the fallback says whether users get it warm."""
    shipped_steps.load_step("declaring_pkg", "warmed", training_step).fallback  # the workload's call of it
    shipped_steps.load_step("declaring_pkg", "cold", training_step)
    shipped_steps.load_step("declaring_pkg", "saved", training_step)
    shipped_steps.load_step("another_pkg", "elsewhere", training_step)
    step_capture.save_step("saved", training_step, model(), *batch())  # outside a build: stores nothing, still saved
    assert step_capture.never_saved("declaring_pkg") == [
        "step 'cold' is declared by load_step but the workload never saved it: it runs its fallback, which the "
        "workload never called either, so it compiles at each user's first call (call the step or its .fallback in "
        "the workload to ship its graphs warm)",
        "step 'warmed' is declared by load_step but the workload never saved it: it runs its fallback, warm where "
        "the workload called it",
    ]


PROVE_FROM_A_SITE = """
import json, sys
import torch  # the interpreter's own, before the site that holds another goes first
sys.path.insert(0, sys.argv[1])
from hatch_precompile.child import package_proof  # installed in that site, as pip installs it
from hatch_precompile.errors import LoaderRefused
try:
    package_proof.prove(b"not a package", {}, [], 120)
except LoaderRefused as exc:
    print(json.dumps([package_proof.__file__, str(exc)]))
"""


def test_the_prover_imports_its_interpreters_torch_not_the_one_beside_hatch_precompile(tmp_path):
    """hatch-precompile installed in a site-packages that holds another torch (bake run from one
    environment for another's interpreter): the proving process imports its interpreter's torch,
    so the proof it records is that torch's. Before, the site went first on its PYTHONPATH."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import hatch_precompile

    site = tmp_path / "site-packages"
    shutil.copytree(Path(hatch_precompile.__file__).parent, site / "hatch_precompile",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("raise ImportError('the torch of the site hatch_precompile is in')\n")
    proc = subprocess.run([sys.executable, "-c", PROVE_FROM_A_SITE, str(site)], capture_output=True, text=True,
                          timeout=300)
    where, said = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
    assert where.startswith(str(site))
    assert "the AOTInductor loader refused the package" in said and "the torch of the site" not in said, said


def test_open_steps_close_their_loaders_at_exit_but_never_under_a_running_call(monkeypatch):
    """Torch removes a loader's extracted package only when the loader is destroyed: at exit each open
    step drops it (a later call is refused, its fallback runs), unless a thread is inside a call or
    the step was opened by the process this one was forked from (whose directory it is)."""
    import threading

    from hatch_precompile.errors import StepRefused
    from hatch_precompile.run.steps import exported_step

    monkeypatch.setattr(exported_step, "_EXIT_WAIT_SECONDS", 0.05)
    idle, busy, forked = (object.__new__(exported_step.ExportedStep) for _ in range(3))
    for step in (idle, busy, forked):
        step._loader, step._lock, step.spec = object(), threading.Lock(), {"arity": 0, "modes": call_contract.process_modes()}
        step._opened_in = os.getpid() if step is not forked else os.getpid() + 1  # opened by a parent before a fork
        step._modules, step._bound, step._pytree, step._in_spec = {}, {}, None, None
        monkeypatch.setattr(step, "_inputs", lambda inputs: [], raising=False)
        exported_step._close_at_exit(step)
    busy._lock.acquire()
    try:
        exported_step._close_open_steps()
    finally:
        busy._lock.release()
    assert idle._loader is None and busy._loader is not None and forked._loader is not None
    with pytest.raises(StepRefused, match="closed as the interpreter exits"):
        idle.call(())


def test_an_export_hides_torchs_own_treespec_deprecation_and_nothing_else():
    """Torch 2.13's export copies its own tree specs, and each copy warns that LeafSpec is deprecated;
    the build's export hides that warning only (a copy of a spec with a leaf warns on that torch)."""
    import warnings

    from hatch_precompile.builder.steps import torch_export

    spec = torch.utils._pytree.tree_flatten([torch.ones(1)])[1]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with torch_export.without_torchs_own_deprecations():
            copy.deepcopy(spec)
            warnings.warn("the author's own", FutureWarning)
    assert [str(w.message) for w in seen] == ["the author's own"]
