"""``python -m hf_gpt2_steps``: the first training step and first inference of a fresh process, as JSON."""

import json
import time
from pathlib import Path

import torch
from torch._dynamo.utils import counters
from torch._inductor.runtime.cache_dir_utils import cache_dir

import hf_gpt2_steps
from hf_gpt2_steps import model as steps


def kernels() -> int:
    return sum(1 for _ in Path(cache_dir()).rglob("*.so"))


before = kernels()
trainer = hf_gpt2_steps.Trainer(hf_gpt2_steps.make_model())
tokens, mask = hf_gpt2_steps.make_batch()
started = time.perf_counter()
loss = trainer.step(tokens, mask).item()
step_seconds = time.perf_counter() - started
started = time.perf_counter()
logits = trainer.predict(tokens, mask)
print(json.dumps({
    "torch": torch.__version__,
    "first_step_seconds": step_seconds,
    "first_predict_seconds": time.perf_counter() - started,
    "loss": loss,
    "weights_sum": float(sum(p.detach().double().sum() for p in trainer.model.parameters())),
    "logits_sum": logits.double().sum().item(),
    "routes": [steps.train_step.route, steps.predict.route],
    "reasons": [steps.train_step.reason, steps.predict.reason],
    "dynamo_frames": sum(counters["frames"].values()),
    "kernels_compiled": kernels() - before,
}))
