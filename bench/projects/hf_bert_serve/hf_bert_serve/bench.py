"""The serving benchmark's protocol (bench/serve.py): ``serve(mode)`` builds what a server builds
and returns ``answer()``, one request's answer. ``weights`` mode never imports transformers."""

import os

import torch

from hf_bert_serve.model import _compiled, classify, classify_step, load_weights, make_model, make_request


def serve(mode: str):
    ids, mask = make_request()
    if mode == "weights":  # a checkpoint and the step: no modeling library
        weights = load_weights(os.environ["BENCH_WEIGHTS"])
        return lambda: classify_step(weights, ids, mask)
    model = make_model()
    model.load_state_dict(load_weights(os.environ["BENCH_WEIGHTS"]))
    run = _compiled() if mode == "compiled" else {"eager": classify, "step": classify_step}[mode]
    return lambda: run(model, ids, mask)


def checkpoint(path: str) -> None:
    """The weights a server reads at run time (another seed than the build's)."""
    torch.save(make_model(seed=7).state_dict(), path)
