"""transformers' BERT for sequence classification from a config, compiled as a module by the package."""

from zoo import compiled
from zoo.bert import make_batch, make_model  # noqa: F401  (the same model and batch)


def train_step(model, batch, optimizer):
    ids, mask, labels = batch
    return compiled.train_step(model, optimizer, input_ids=ids, attention_mask=mask, labels=labels)


def infer(model, batch):
    ids, mask, _ = batch
    return compiled.module(model)(input_ids=ids, attention_mask=mask).logits
