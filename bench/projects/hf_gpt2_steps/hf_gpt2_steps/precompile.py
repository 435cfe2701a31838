"""Warm-up workload: capture both steps (torch 2.14+), and warm the torch.compile path they fall back to."""

import hatch_precompile
from hf_gpt2_steps.model import forward, make_batch, make_model, predict, train_step, training_step


def workload() -> None:
    model = make_model()
    tokens, mask = make_batch()
    hatch_precompile.save_step("train_step", training_step, model, tokens, mask)
    hatch_precompile.save_step("predict", forward, model, tokens, mask)
    train_step.fallback(model, tokens, mask)  # what runs where the captured steps cannot
    predict.fallback(model, tokens, mask)
