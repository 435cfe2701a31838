"""The warm-up workload hatch-precompile runs at wheel build: use the model as users do."""

import torch

import hatch_precompile
from sample_pkg.model import Trainer, make_batch, make_model


def workload() -> None:
    trainer = Trainer(make_model())
    images, labels = make_batch()
    trainer.step(images, labels)  # compiled forward + backward, then the optimizer step
    trainer.predict(images)  # compiled inference (no_grad) graph
    model = make_model(device="cpu").eval()  # the shipped TorchScript module is the CPU one
    hatch_precompile.save_torchscript("classifier", torch.jit.trace(model, make_batch(device="cpu")[0]))
