"""The benchmark protocol (bench/ttfs.py): each function makes one first call and returns its output.

This module is the 2-layer model; ``hf_gpt2.bench_8`` the 8-layer one."""

from hf_gpt2.model import Trainer, make_batch, make_model


def train_step(layers: int = 2):
    return Trainer(make_model(layers)).step(make_batch())


def infer(layers: int = 2):
    return Trainer(make_model(layers)).predict(make_batch())
