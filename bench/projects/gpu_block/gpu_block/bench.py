"""The benchmark protocol (bench/ttfs.py, bench/gpu.py): each function makes one first call and returns its output."""

from gpu_block.model import Trainer, make_batch, make_model


def train_step():
    return Trainer(make_model()).step(*make_batch())


def infer():
    return Trainer(make_model()).predict(make_batch()[0])
