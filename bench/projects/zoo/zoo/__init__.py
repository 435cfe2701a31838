"""Library models nobody here wrote, each compiled with plain ``torch.compile`` by this package: the
zoo of bench/zoo.py. Each model is a module of its own (``zoo.<case>``) with ``make_model()``,
``make_batch()``, ``train_step(model, batch, optimizer)`` and ``infer(model, batch)``."""

import hatch_precompile

precompile_status = hatch_precompile.load(__name__)

CASES = ("gpt2_function", "gpt2_module", "bert_function", "bert_module", "llama", "t5", "vit", "resnet18",
         "convnext")
