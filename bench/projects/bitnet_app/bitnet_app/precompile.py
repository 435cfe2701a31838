"""The build's workload: one unpacking of a layer's packed weights, as the application's first call makes it."""

from bitnet_app import weights


def workload() -> None:
    weights.dense(weights.packed())
