"""A text classifier (transformers' BertForSequenceClassification) whose inference ships exported.

Serving needs the weights and the exported step, not transformers: ``classify_step(weights,
input_ids, attention_mask)`` with the tensors of a checkpoint runs the AOTInductor package. The
fallback (another torch, a shape outside the exported ranges) builds the model with transformers.
"""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from hf_bert_serve.model import classify, classify_step, load_weights, make_model, make_request  # noqa: E402

__all__ = ["classify", "classify_step", "load_weights", "make_model", "make_request", "precompile_status"]
