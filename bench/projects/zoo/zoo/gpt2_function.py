"""transformers' GPT-2 from a config; the package compiles two functions that take the model: its
loss from ``labels``, and the last position's logits under no_grad."""

import torch

from zoo.gpt2 import make_batch, make_model  # noqa: F401


def lm_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


def last_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits[:, -1]


compiled_loss = torch.compile(lm_loss)
compiled_logits = torch.compile(last_logits)


def train_step(model, ids, optimizer):
    optimizer.zero_grad(set_to_none=True)
    loss = compiled_loss(model, ids)
    loss.backward()
    optimizer.step()
    return loss.detach()


def infer(model, ids):
    return compiled_logits(model, ids)
