"""Warm-up workload: the served inference exported for any batch size, its fallback warm too."""

import torch

import hatch_precompile
from bn_convnet.model import BATCHES, classify, compiled, make_images, make_model


def workload() -> None:
    served = make_model().eval()
    images = make_images()
    with torch.no_grad():
        hatch_precompile.save_step("classify", classify, served, images, dynamic_shapes=(None, {0: BATCHES}))
        compiled()(served, images)  # the fallback's dynamic graph, shipped warm
