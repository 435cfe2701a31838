"""timm's ConvNeXt (atto, 224x224, batch 2), compiled as a module by the package."""

import timm
import torch

from zoo.resnet18 import infer, make_batch, train_step  # noqa: F401  (the same batch and steps)


def make_model():
    torch.manual_seed(0)
    return timm.create_model("convnext_atto", pretrained=False, num_classes=10)
