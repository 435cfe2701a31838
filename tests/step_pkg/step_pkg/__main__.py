"""``python -m step_pkg``: the first calls of both steps in a fresh process, as JSON."""

import json
import time
from pathlib import Path

import torch
from torch._dynamo.utils import counters
from torch._inductor.runtime.cache_dir_utils import cache_dir

import step_pkg


def kernels() -> int:
    return sum(1 for _ in Path(cache_dir()).rglob("*.so"))


def grad_norm(model) -> float:
    return float(sum(p.grad.double().pow(2).sum() for p in model.parameters() if p.grad is not None))


before = kernels()
model = step_pkg.make_model()
x, y = step_pkg.make_batch()
result = {"torch": torch.__version__, "precompiled": step_pkg.precompile_status.loaded}
started = time.perf_counter()
result["loss"] = step_pkg.train_step(model, x, y).item()
result["first_step_seconds"] = time.perf_counter() - started
result["grad_norm"] = grad_norm(model)
result["logits_sum"] = step_pkg.predict(model, x).double().sum().item()
result["routes"] = [step_pkg.train_step.route, step_pkg.predict.route]
result["reasons"] = [step_pkg.train_step.reason, step_pkg.predict.reason]
result["dynamo_frames"] = sum(counters["frames"].values())
result["kernels_compiled"] = kernels() - before
# Outside the contract: another batch size, then eval mode. Each falls back and stays right.
small_x, small_y = step_pkg.make_batch(8)
eager = step_pkg.make_model()
want = step_pkg.model.training_step(eager, small_x, small_y).item()
model.zero_grad()
got = step_pkg.train_step(model, small_x, small_y).item()
result["other_shape"] = [step_pkg.train_step.route, step_pkg.train_step.reason, got, want]
model.eval()
got = step_pkg.predict(model, x).double().sum().item()
want = step_pkg.model.forward(eager.eval(), x).double().sum().item()
result["eval_mode"] = [step_pkg.predict.route, step_pkg.predict.reason, got, want]
served = step_pkg.make_model().eval()
with torch.no_grad():
    got = step_pkg.classify_step(served, small_x)
    error = (got - step_pkg.model.classify(served, small_x)).abs().max().item()
result["classify"] = [step_pkg.classify_step.route, step_pkg.classify_step.reason, error]
print(json.dumps(result))
