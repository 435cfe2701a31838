"""The build's workload: capture the steps, and warm the torch.compile path they fall back to."""

import torch

import hatch_precompile
from step_pkg.model import (
    BATCH,
    TRAIN_BATCH,
    classify,
    classify_step,
    forward,
    make_batch,
    make_model,
    make_tagger,
    predict,
    tagging_loss,
    train_step,
    training_step,
)


def workload() -> None:
    model = make_model()
    x, y = make_batch()
    hatch_precompile.save_step("train_step", training_step, model, x, y)
    hatch_precompile.save_step("predict", forward, model, x)
    train_step.fallback(model, x, y)  # older torch, or arguments the captured step was not made for
    predict.fallback(model, x)
    served = make_model().eval()
    with torch.no_grad():  # inference, in eval(): exported, any batch size up to 256
        hatch_precompile.save_step("classify", classify, served, x, dynamic_shapes=(None, {0: BATCH}))
        classify_step.fallback(served, x)
    tagger = make_tagger().train()  # the loss's forward and backward: exported, any batch of 2 to 256
    hatch_precompile.save_step("loss", tagging_loss, tagger, x, y, backward=True,
                               dynamic_shapes=(None, {0: TRAIN_BATCH}, {0: TRAIN_BATCH}))
