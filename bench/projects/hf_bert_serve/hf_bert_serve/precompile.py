"""The build's workload: export the classifier for any batch and length, warm the fallback too."""

import torch

import hatch_precompile
from hf_bert_serve.model import BATCH, LENGTH, _compiled, classify, make_model, make_request


def workload() -> None:
    model = make_model()
    ids, mask = make_request(batch=4, length=24)
    with torch.no_grad():
        hatch_precompile.save_step("classify", classify, model, ids, mask,
                                   dynamic_shapes=(None, {0: BATCH, 1: LENGTH}, {0: BATCH, 1: LENGTH}))
        _compiled()(model, ids, mask)  # the fallback's dynamic graph, shipped warm
