"""The build's workload: capture both steps, and warm the torch.compile path they fall back to."""

import hatch_precompile
from step_pkg.model import forward, make_batch, make_model, predict, train_step, training_step


def workload() -> None:
    model = make_model()
    x, y = make_batch()
    hatch_precompile.save_step("train_step", training_step, model, x, y)
    hatch_precompile.save_step("predict", forward, model, x)
    train_step.fallback(model, x, y)  # older torch, or arguments the captured step was not made for
    predict.fallback(model, x)
