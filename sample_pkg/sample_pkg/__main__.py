"""``python -m sample_pkg [--json]``: time the first training step, inference call and served call of a fresh process."""

import json
import sys
import time
from pathlib import Path

import torch
from torch._dynamo.utils import counters
from torch._inductor.runtime.cache_dir_utils import cache_dir

import hatch_precompile
import sample_pkg  # `python -m` imported it already, so import time is not measured here


def count_kernels() -> int:
    """Kernel binaries in the cache dir torch itself uses: a new one is a g++ run."""
    return sum(1 for _ in Path(cache_dir()).rglob("*.so"))


def compilation_metrics() -> list:
    """torch's record of each compiled frame, or none where that internal moved (a record of work
    at run time, such as loading a compiled graph at its first call, names no frame)."""
    try:
        from torch._dynamo.utils import get_compilation_metrics

        return [m for m in get_compilation_metrics() if getattr(m, "co_name", None)]
    except Exception:
        return []


def compile_phases(frames: list) -> dict:
    """Where ``frames`` spent their time: Dynamo tracing them, and the backend (on a warm start:
    loading the cached graphs). Fields read with defaults, as every torch internal."""
    whole = sum(getattr(m, "entire_frame_compile_time_s", None) or 0.0 for m in frames)
    backend = sum(getattr(m, "backend_compile_time_s", None) or 0.0 for m in frames)
    return {"frames": len(frames), "dynamo_seconds": whole - backend, "backend_seconds": backend}


def main() -> None:
    kernels_before = count_kernels()
    trainer = sample_pkg.Trainer(sample_pkg.make_model())
    images, labels = sample_pkg.make_batch()
    metrics_before = len(compilation_metrics())
    t0 = time.perf_counter()
    loss = trainer.step(images, labels).item()  # .item() waits for the GPU, if any
    step_seconds = time.perf_counter() - t0
    step_phases = compile_phases(compilation_metrics()[metrics_before:])
    metrics_before = len(compilation_metrics())
    t0 = time.perf_counter()
    logits_sum = trainer.predict(images).double().sum().item()
    predict_seconds = time.perf_counter() - t0
    predict_phases = compile_phases(compilation_metrics()[metrics_before:])
    # The training numbers stop here: where the classify step falls back to torch.compile, its
    # graph for a batch size the workload never used is its own compile, reported on its own.
    aot_autograd = dict(counters["aot_autograd"])
    inductor = {k: v for k, v in counters["inductor"].items() if "cache" in k}
    kernels_compiled = count_kernels() - kernels_before
    served = sample_pkg.make_model().eval()
    with torch.no_grad():
        t0 = time.perf_counter()
        probabilities = sample_pkg.classify_step(served, images[:7])  # a batch size the workload never used
        classify_seconds = time.perf_counter() - t0
        classify_error = (probabilities - sample_pkg.classify(served, images[:7])).abs().max().item()
    status = sample_pkg.precompile_status
    result = {
        "first_step_seconds": step_seconds,
        "first_predict_seconds": predict_seconds,
        "first_classify_seconds": classify_seconds,
        "classify_route": sample_pkg.classify_step.route,
        "classify_reason": sample_pkg.classify_step.reason,
        "classify_error": classify_error,
        "classify_kernels_compiled": count_kernels() - kernels_before - kernels_compiled,
        "first_step_phases": step_phases,
        "first_predict_phases": predict_phases,  # frames 0: served untraced from the shipped Dynamo cache entry
        "served": hatch_precompile.served(),
        "step_route": sample_pkg.loss_step.route,
        "step_reason": sample_pkg.loss_step.reason,
        "loss": loss,
        "logits_sum": logits_sum,
        "device": str(images.device),
        "precompiled": status.loaded,
        "precompile_reason": status.reason,
        "aot_autograd": aot_autograd,
        "inductor": inductor,
        "kernels_compiled": kernels_compiled,
        "torch": torch.__version__,
    }
    if "--json" in sys.argv:
        print(json.dumps(result))
        return
    print(f"precompiled caches:      {'loaded' if status.loaded else 'not loaded'} ({status.reason})")
    print(f"first training step:     {step_seconds:.2f} s  (loss {result['loss']:.4f}, on {result['device']}, "
          f"by {result['step_route']})")
    traced = "traced by Dynamo" if predict_phases["frames"] else "served untraced"
    print(f"first inference call:    {predict_seconds:.2f} s  ({traced})")
    aot = result["aot_autograd"]
    print(
        f"AOTAutograd cache:       {aot.get('autograd_cache_hit', 0)} hit(s), "
        f"{aot.get('autograd_cache_miss', 0)} miss(es); C++ kernels compiled: {result['kernels_compiled']}"
    )
    print(
        f"first served call:       {classify_seconds:.3f} s  (the classify step, by {result['classify_route']}; "
        f"C++ kernels compiled: {result['classify_kernels_compiled']})"
    )


main()
