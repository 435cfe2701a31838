"""The situations of tests/integration/test_dependency_compiles.py, one group per process.

    python situations.py GROUP

runs GROUP's situations in turn and prints one JSON line: for each situation, how many frames Dynamo
traced for it and what it computed (the tokens, the unpacked weights), then what became of each
compiled function (``served()``) and what ``load()`` said. Run once with the package's shipped
entries and once with ``PRECOMPILE=0`` (a cold compile), the two must compute the same.
"""

import json
import os
import pathlib
import sys
import threading

GROUP = sys.argv[1]

import deps_pkg  # noqa: E402
import torch  # noqa: E402
from deps_pkg import llm, weights  # noqa: E402
from torch._dynamo.utils import get_compilation_metrics  # noqa: E402

from hatch_precompile.run.served import served_compile  # noqa: E402

results, compiled_kernels = {}, {}


def frames() -> int:
    return sum(1 for m in get_compilation_metrics() if m.co_name)


def kernels() -> int:
    return sum(1 for _ in pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).rglob("*.so"))


def situation(run):
    """Record what ``run`` computed, how many frames Dynamo traced and kernels it compiled for it."""
    before, built = frames(), kernels()
    out = run()
    results[run.__doc__] = [frames() - before, [float(v) for v in out]]
    compiled_kernels[run.__doc__] = kernels() - built
    return run


def tokens(out):
    return out.flatten().tolist()


def generate():
    """transformers' generate() with a static cache, the compile it makes inside on the package's behalf."""

    @situation
    def _():
        """the package's generate, as its build ran it"""
        return tokens(llm.generate(llm.make_model(), llm.prompt()))

    @situation
    def _():
        """the library's rotary function replaced by the user's, wrapped as the library wraps it"""
        from transformers.integrations import use_kernel_forward_from_hub
        from transformers.models.llama import modeling_llama

        def sharpened(q, k, cos, sin, unsqueeze_dim=1):  # the library's rotary, its attention made one-hot
            cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
            rotate = modeling_llama.rotate_half
            return (q * cos + rotate(q) * sin) * 1e4, k * cos + rotate(k) * sin  # other tokens than the library's

        original = modeling_llama.apply_rotary_pos_emb
        modeling_llama.apply_rotary_pos_emb = use_kernel_forward_from_hub("rotary_pos_emb")(sharpened)
        try:
            return tokens(llm.generate(llm.make_model(), llm.prompt()))
        finally:
            modeling_llama.apply_rotary_pos_emb = original

    @situation
    def _():
        """the user's own generate on their own model, outside the package"""
        model = llm.make_model(seed=7)
        with torch.no_grad():
            return tokens(model.generate(llm.prompt(), max_new_tokens=4, do_sample=False, cache_implementation="static",
                                         pad_token_id=0, compile_config=llm.compile_config()))

    @situation
    def _():
        """a second model in the same process, other weights"""
        return tokens(llm.generate(llm.make_model(seed=3), llm.prompt()))

    @situation
    def _():
        """sampling with a seed"""
        torch.manual_seed(5)
        return tokens(llm.generate(llm.make_model(), llm.prompt(), do_sample=True, top_k=8))

    @situation
    def _():
        """the model's generation config changed: no cache (nothing compiles)"""
        model = llm.make_model()
        model.generation_config.use_cache = False
        with torch.no_grad():
            return tokens(model.generate(llm.prompt(), max_new_tokens=4, do_sample=False, pad_token_id=0))

    @situation
    def _():
        """another max_new_tokens"""
        return tokens(llm.generate(llm.make_model(), llm.prompt(), new=6))

    @situation
    def _():
        """another prompt length and batch"""
        return tokens(llm.generate(llm.make_model(), llm.prompt(batch=2, length=5)))

    @situation
    def _():
        """the model's config changed: another attention implementation"""
        model = llm.make_model()
        model.set_attn_implementation("eager")
        return tokens(llm.generate(model, llm.prompt()))

    @situation
    def _():
        """another dtype"""
        return tokens(llm.generate(llm.make_model().to(torch.bfloat16), llm.prompt()))

    @situation
    def _():
        """a model the user builds with another config"""
        return tokens(llm.generate(llm.make_model(hidden_size=48, intermediate_size=96), llm.prompt()))

    @situation
    def _():
        """the package's generate again, after all of these"""
        return tokens(llm.generate(llm.make_model(seed=9), llm.prompt(seed=2)))

    @situation
    def _():
        """the compile config changed: fullgraph"""
        return tokens(llm.generate(llm.make_model(), llm.prompt(), config=llm.compile_config(fullgraph=True)))

    @situation
    def _():
        """the compile config changed: another mode"""
        return tokens(llm.generate(llm.make_model(), llm.prompt(), config=llm.compile_config(mode="max-autotune-no-cudagraphs")))


def unpacking():
    """transformers' own @torch.compile function (bitnet's unpack_weights), called by the package."""

    def in_thread(call, *args):
        out = []
        worker = threading.Thread(target=lambda: out.append(call(*args)))
        worker.start()
        worker.join()
        return out[0]

    @situation
    def _():
        """the package unpacking weights, as its build did"""
        return weights.dense(weights.packed()).flatten().tolist()

    @situation
    def _():
        """other weights of the same shape"""
        return weights.dense(weights.packed(seed=4)).flatten().tolist()

    @situation
    def _():
        """from a worker thread the package runs"""
        return in_thread(weights.dense, weights.packed(seed=5)).flatten().tolist()

    @situation
    def _():
        """another shape"""
        return weights.dense(weights.packed(rows=32, cols=16)).flatten().tolist()

    @situation
    def _():
        """the library's function called by the user, outside the package"""
        from transformers.integrations.bitnet import unpack_weights

        return unpack_weights(weights.packed(seed=6), torch.float32).flatten().tolist()


{"generate": generate, "unpacking": unpacking}[GROUP]()
status = deps_pkg.precompile_status
print(json.dumps({"results": results, "kernels": compiled_kernels, "served": served_compile.served(),
                  "reason": status.reason, "notes": list(status.notes)}))
