"""transformers' ViT for image classification, a tiny config, compiled as a module by the package."""

import torch
from transformers import ViTConfig, ViTForImageClassification

from zoo import compiled


def make_model():
    torch.manual_seed(0)
    return ViTForImageClassification(ViTConfig(image_size=32, patch_size=8, hidden_size=128, num_hidden_layers=2,
                                               num_attention_heads=4, intermediate_size=256, num_labels=10,
                                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def make_batch():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(4, 3, 32, 32, generator=generator), torch.randint(0, 10, (4,), generator=generator)


def train_step(model, batch, optimizer):
    images, labels = batch
    return compiled.train_step(model, optimizer, pixel_values=images, labels=labels)


def infer(model, batch):
    return compiled.module(model)(pixel_values=batch[0]).logits
