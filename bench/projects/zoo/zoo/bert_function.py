"""transformers' BERT for sequence classification from a config; the package compiles two functions
that take the model: its loss from ``labels``, and the class probabilities."""

import torch

from zoo.bert import make_batch, make_model  # noqa: F401


def classification_loss(model, ids, mask, labels):
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss


def probabilities(model, ids, mask):
    return model(input_ids=ids, attention_mask=mask).logits.softmax(-1)


compiled_loss = torch.compile(classification_loss)
compiled_probabilities = torch.compile(probabilities)


def train_step(model, batch, optimizer):
    optimizer.zero_grad(set_to_none=True)
    loss = compiled_loss(model, *batch)
    loss.backward()
    optimizer.step()
    return loss.detach()


def infer(model, batch):
    ids, mask, _ = batch
    return compiled_probabilities(model, ids, mask)
