"""The serving benchmark's protocol (bench/serve.py): ``serve(mode)`` builds what a server builds
and returns ``answer()``, one request's answer: the model by ``from_pretrained`` of a local
checkpoint, or in ``weights`` mode its tensors alone (transformers never imported)."""

import os

import torch

from hf_bert_serve.model import _compiled, classify, classify_step, load_weights, make_model, make_request

serves_weights = True


def serve(mode: str):
    ids, mask = make_request()
    if mode == "weights":  # a checkpoint and the step: no modeling library
        weights = load_weights(os.environ["BENCH_WEIGHTS"])
        return lambda: classify_step(weights, ids, mask)
    from transformers import BertForSequenceClassification

    model = BertForSequenceClassification.from_pretrained(os.environ["BENCH_WEIGHTS"] + ".pretrained").eval()
    run = _compiled() if mode == "compiled" else {"eager": classify, "step": classify_step}[mode]
    return lambda: run(model, ids, mask)


def checkpoint(path: str) -> None:
    """The weights a server reads at run time: another seed than the build's, every bias and norm
    moved off its init (a fine-tuned model's), saved as ``save_pretrained`` and as a state dict."""
    model = make_model(seed=7)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.05 * torch.randn_like(tensor))
    model.save_pretrained(path + ".pretrained")
    torch.save(model.state_dict(), path)
