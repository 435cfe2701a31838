"""torchvision's ResNet-18 (224x224, batch 2), compiled as a module by the package."""

import torch
import torch.nn.functional as F
import torchvision

from zoo import compiled


def make_model():
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10)


def make_batch():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(2, 3, 224, 224, generator=generator), torch.randint(0, 10, (2,), generator=generator)


def train_step(model, batch, optimizer):
    images, labels = batch
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(compiled.module(model)(images), labels)
    loss.backward()
    optimizer.step()
    return loss.detach()


def infer(model, batch):
    return compiled.module(model)(batch[0])
