"""The build's workload: the served steps exported from models as a training script leaves them,
BERT's fine-tuning loss (dropout 0: eager's gradients to compare) with its backward, and a
torch.compile'd training step with backward() inside, as users write one."""

import torch

import hatch_precompile
from serve_pkg.model import (
    BATCH,
    LENGTH,
    bert_loss,
    classify,
    compiled_training_step,
    make_bert,
    make_convnet,
    predict,
    requests,
)


def workload() -> None:
    bert = make_bert()
    ids, mask = requests(4, 24)
    bert.train()
    bert(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 2, 1]))  # sets config.problem_type
    bert.eval()
    convnet = make_convnet()
    with torch.no_grad():
        hatch_precompile.save_step("bert", classify, bert, ids, mask,
                                   dynamic_shapes=(None, {0: BATCH, 1: LENGTH}, {0: BATCH, 1: LENGTH}))
        hatch_precompile.save_step("convnet", predict, convnet, torch.randn(4, 3, 16, 16),
                                   dynamic_shapes=(None, {0: BATCH}))
    tuned = make_bert(dropout=0.0).train()
    hatch_precompile.save_step("bert_loss", bert_loss, tuned, ids, mask, torch.tensor([0, 1, 2, 1]), backward=True,
                               dynamic_shapes=(None, {0: BATCH, 1: LENGTH}, {0: BATCH, 1: LENGTH}, {0: BATCH}))
    compiled_training_step()(make_bert(dropout=0.0).train(), ids, mask, torch.tensor([0, 1, 2, 1]))
