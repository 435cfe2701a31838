"""The benchmark protocols: bench/ttfs.py's first calls and bench/serve.py's ``serve(mode)``."""

from tiny_transformer.model import Trainer, classify, classify_step, make_batch, make_model


def train_step():
    return Trainer(make_model()).step(*make_batch())


def infer():
    return Trainer(make_model()).predict(make_batch()[0])


def serve(mode: str):
    model = make_model().eval()
    tokens = make_batch(seed=5)[0][:5]  # a batch size the workload never used
    run = classify_step.fallback if mode == "compiled" else {"eager": classify, "step": classify_step}[mode]
    return lambda: run(model, tokens)
