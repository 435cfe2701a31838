#!/usr/bin/env python3
"""Issue 21's route past Dynamo, measured: ``torch.compiler.precompile`` on the GPT-2 bench model.

    python3 bench/precompile_route.py --python /path/to/venv/bin/python [--layers 2] [--repeats 2]

``--python`` has torch 2.14 (the first with ``torch.compiler.precompile``) and ``transformers``.
Each row is a fresh process with its own ``TORCHINDUCTOR_CACHE_DIR``, run beside it:

- ``cold``: ``torch.compile(model)``, the first training step (forward, loss, backward) and the
  first no-grad forward, compiled from nothing;
- ``eager``: the same calls without compiling (the floor);
- ``capture``: ``torch.compiler.precompile`` of each (once, not timed against the others);
- ``load, kernels present``: a copy of the capture's cache dir (the C++ kernels built: what a
  shipped set installs), ``precompile.load`` then the first call of each;
- ``load, Mega-Cache only``: an empty cache dir, so the load primes it from the artifact's
  Mega-Cache bytes and builds the C++ kernels itself.

The model is ``hf_gpt2``'s (``bench/projects/hf_gpt2``) with three changes the route needs:
eager attention (SDPA's mask helper reads tensor values, which a ``make_fx`` trace cannot), an
explicit all-ones attention mask (the same: the packed-sequence check), and ``use_cache=False``
(the empty KV-cache tensors would be baked in as constants). Prints the table and the ratios,
with the loss, gradient norm and logits of every row (the same as cold's, or the route fails),
and writes ``results.json``. Standard library here; the rows run in ``--python``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "bench" / "projects" / "hf_gpt2"

CHILD = r'''
import json, os, sys, time
import torch
from hf_gpt2.model import make_batch, make_model

mode, layers, artifacts = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def train_step(model, tokens, mask):
    loss = model(input_ids=tokens, labels=tokens, attention_mask=mask, use_cache=False).loss
    loss.backward()
    return loss.detach()


def infer(model, tokens, mask):
    with torch.no_grad():
        return model(input_ids=tokens, attention_mask=mask, use_cache=False).logits


model, tokens = make_model(layers), make_batch()
model.set_attn_implementation("eager")
mask = torch.ones_like(tokens)
out = {"mode": mode, "torch": torch.__version__}


def record(name, run, result):
    out[name] = run
    if name == "train":
        out["loss"] = float(result)
        out["grad_norm"] = float(sum(p.grad.double().pow(2).sum() for p in model.parameters() if p.grad is not None))
        model.zero_grad(set_to_none=True)
    else:
        out["logits_sum"] = float(result.double().sum())


for name, fn in (("train", train_step), ("infer", infer)):
    if mode == "capture":
        started = time.perf_counter()
        code, cache = torch.compiler.precompile(fn, model, tokens, mask)
        out[name] = {"capture_s": time.perf_counter() - started, "bytes": len(code) + len(cache)}
        open(f"{artifacts}/{name}.py", "w").write(code)
        open(f"{artifacts}/{name}.cache", "wb").write(cache)
        model.zero_grad(set_to_none=True)
    elif mode == "load":
        started = time.perf_counter()
        loaded = torch.compiler.precompile.load(open(f"{artifacts}/{name}.py").read(),
                                                open(f"{artifacts}/{name}.cache", "rb").read())
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        result = loaded(model, tokens, mask)
        call_s = time.perf_counter() - started
        record(name, {"load_s": load_s, "call_s": call_s, "first_s": load_s + call_s}, result)
    else:
        target = torch.compile(model) if mode == "cold" else model
        started = time.perf_counter()
        result = fn(target, tokens, mask)
        seconds = time.perf_counter() - started
        record(name, {"first_s": seconds}, result)
print(json.dumps(out))
'''


def child(python: str, mode: str, layers: int, artifacts: Path, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR", "PRECOMPILE", "HATCH_"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), PYTHONPATH=str(PROJECT))
    proc = subprocess.run([python, "-c", CHILD, mode, str(layers), str(artifacts)], env=env, cwd=cache.parent,
                          text=True, capture_output=True)  # cwd beside the cache dir, never in it
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="a Python with torch 2.14+ and transformers")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "precompile-route")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="precompile-route-") as tmp:
        work = Path(tmp)
        artifacts, built = work / "artifacts", work / "capture" / "cache"
        artifacts.mkdir()
        built.mkdir(parents=True)
        print("- capture (torch.compiler.precompile of the training step and of the forward) ...", flush=True)
        rows: dict[str, list[dict]] = {"capture": [child(args.python, "capture", args.layers, artifacts, built)]}
        arms = ("cold", "eager", "load, kernels present", "load, Mega-Cache only")
        for repeat in range(args.repeats):
            for arm in arms:
                run_dir = work / f"{arm.replace(' ', '').replace(',', '-')}-{repeat}"
                cache = run_dir / "cache"
                if arm == "load, kernels present":
                    shutil.copytree(built, cache)
                else:
                    cache.mkdir(parents=True)
                print(f"- {arm} ({repeat + 1}/{args.repeats}) ...", flush=True)
                mode = {"cold": "cold", "eager": "eager"}.get(arm, "load")
                rows.setdefault(arm, []).append(child(args.python, mode, args.layers, artifacts, cache))
    median = {arm: {name: statistics.median(r[name]["first_s"] for r in found) for name in ("train", "infer")}
              for arm, found in rows.items() if arm != "capture"}
    cold = median["cold"]
    lines = ["| row | first training step | first inference | training: cold / row | inference: cold / row "
             "| loss | grad norm | logits sum |", "|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        last = rows[arm][-1]
        lines.append(f"| {arm} | {median[arm]['train']:.2f} s | {median[arm]['infer']:.2f} s | "
                     f"{cold['train'] / median[arm]['train']:.1f}x | {cold['infer'] / median[arm]['infer']:.1f}x | "
                     f"{last['loss']!r} | {last['grad_norm']!r} | {last['logits_sum']!r} |")
    capture = rows["capture"][0]
    header = (f"torch {capture['torch']}, GPT-2 {args.layers} layers, {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cores, medians of {args.repeats} fresh processes; capture took "
              f"{capture['train']['capture_s']:.1f} s (training step) and {capture['infer']['capture_s']:.1f} s (forward)")
    table = header + "\n\n" + "\n".join(lines) + "\n"
    print("\n" + table)
    (args.out / "results.json").write_text(json.dumps(
        {"date": time.strftime("%Y-%m-%d"), "layers": args.layers, "rows": rows, "medians": median, "table": table},
        indent=1))


if __name__ == "__main__":
    main()
