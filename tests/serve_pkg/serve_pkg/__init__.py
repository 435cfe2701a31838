"""Two real models whose inference ships exported: a transformers BERT classifier with a padding
mask (3 classes) and a convnet with BatchNorm (a 5-class head). Their tests serve them as users hold
them: from a checkpoint, constructed fresh, after fine-tuning."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

from serve_pkg.model import bert_step, classify, convnet_step, make_bert, make_convnet, predict  # noqa: E402

__all__ = ["bert_step", "classify", "convnet_step", "make_bert", "make_convnet", "precompile_status", "predict"]
