"""The benchmark protocol (bench/ttfs.py) on the 8-layer model."""

from hf_gpt2 import bench


def train_step():
    return bench.train_step(layers=8)


def infer():
    return bench.infer(layers=8)
