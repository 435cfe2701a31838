"""The warm-up workload hatch-precompile runs at wheel build: use the model as users do."""

import torch

import hatch_precompile
from sample_pkg.model import BATCH, Trainer, classify, classify_step, make_batch, make_model, training_loss


def workload() -> None:
    trainer = Trainer(make_model())
    images, labels = make_batch()
    # The loss's forward and backward, exported as one graph for any batch of 1 to 1024 images.
    hatch_precompile.save_step("loss", training_loss, trainer.model, images, labels, backward=True,
                               dynamic_shapes=(None, {0: BATCH}, {0: BATCH}))
    trainer.step(images, labels)  # here the step's fallback: torch.compile, then backward(), warm too
    trainer.predict(images)  # compiled inference (no_grad) graph
    served = make_model().eval()
    with torch.no_grad():  # inference in eval(): exported, for any batch of 1 to 1024 images
        hatch_precompile.save_step("classify", classify, served, images, dynamic_shapes=(None, {0: BATCH}))
        classify_step.fallback(served, images)  # where the exported step cannot run: warm too
    model = make_model(device="cpu").eval()  # the shipped TorchScript module is the CPU one
    hatch_precompile.save_torchscript("classifier", torch.jit.trace(model, make_batch(device="cpu")[0]))
