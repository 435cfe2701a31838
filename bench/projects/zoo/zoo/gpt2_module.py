"""transformers' GPT-2 from a config, compiled as a module by the package."""

from zoo import compiled
from zoo.gpt2 import make_batch, make_model  # noqa: F401  (the same model and batch)


def train_step(model, ids, optimizer):
    return compiled.train_step(model, optimizer, input_ids=ids, labels=ids)


def infer(model, ids):
    return compiled.module(model)(input_ids=ids).logits
