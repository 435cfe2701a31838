#!/usr/bin/env python3
"""Steps shipped with ``save_step`` / ``load_step`` on real library code, measured as users get them.

    python3 bench/shipped_steps.py --python /path/to/venv/bin/python [--repeats 3]

``--python`` has torch 2.14+ (the first with ``torch.compiler.precompile``) and ``transformers``;
hatchling, build and this checkout's hatch-precompile are installed into it. The script builds
``bench/projects/hf_gpt2_steps`` (GPT-2, 2 layers, its training step and forward declared with
``load_step``) into a wheel with that Python, installs it, then runs fresh processes side by side,
each with an empty ``TORCHINDUCTOR_CACHE_DIR``:

- ``cold``: ``PRECOMPILE=0``: the same package code, the steps fall back to ``torch.compile``;
- ``precompiled``: the shipped caches installed by ``load()``, the steps run as captured.

The first training step is forward, loss, backward (the step) and AdamW's update (eager, in
both rows). Prints the table with the medians, the ratios, the loss, the weights after the update,
the logits, which route each step took, Dynamo's frames and the kernels built; writes the raw
rows as JSON. Standard library here; the rows run in ``--python``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "bench" / "projects" / "hf_gpt2_steps"
ROWS = {"cold": {"PRECOMPILE": "0"}, "precompiled": {}}


def sh(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], text=True, capture_output=True, **kwargs)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
    return proc


def child(python: str, work: Path, env_extra: dict[str, str]) -> dict:
    cache = work / "cache"
    cache.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR", "PRECOMPILE", "HATCH_"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), **env_extra)
    proc = sh([python, "-m", "hf_gpt2_steps"], env=env, cwd=work)  # beside the cache dir, never in it
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="a Python with torch 2.14+ and transformers")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "shipped-steps.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shipped-steps-") as tmp:
        work = Path(tmp)
        print("- installing hatchling, build and hatch-precompile into --python ...", flush=True)
        sh([args.python, "-m", "pip", "install", "-q", "hatchling", "build", f"{ROOT}[publish]"])
        print("- building the hf_gpt2_steps wheel (the workload captures both steps) ...", flush=True)
        started = time.perf_counter()
        sh([args.python, "-m", "build", "--wheel", "--no-isolation", "-o", work / "dist", PROJECT])
        build_s = time.perf_counter() - started
        (wheel,) = (work / "dist").glob("*.whl")
        sh([args.python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel])
        rows: dict[str, list[dict]] = {name: [] for name in ROWS}
        for repeat in range(args.repeats):
            for name, env in ROWS.items():
                print(f"- {name} ({repeat + 1}/{args.repeats}) ...", flush=True)
                rows[name].append(child(args.python, work / f"{name}-{repeat}", env))
    median = {name: {key: statistics.median(r[key] for r in found) for key in ("first_step_seconds", "first_predict_seconds")}
              for name, found in rows.items()}
    cold = median["cold"]
    lines = ["| row | first training step | vs cold | first inference | vs cold | loss | weights after AdamW | "
             "logits sum | routes | Dynamo frames | kernels built |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in ROWS:
        last, m = rows[name][-1], median[name]
        lines.append(
            f"| {name} | {m['first_step_seconds']:.2f} s | {cold['first_step_seconds'] / m['first_step_seconds']:.1f}x "
            f"| {m['first_predict_seconds']:.2f} s | {cold['first_predict_seconds'] / m['first_predict_seconds']:.1f}x "
            f"| {last['loss']!r} | {last['weights_sum']!r} | {last['logits_sum']!r} | {', '.join(last['routes'])} "
            f"| {last['dynamo_frames']} | {last['kernels_compiled']} |")
    header = (f"torch {rows['cold'][0]['torch']}, GPT-2 2 layers, {cpu_model()}, {os.cpu_count()} cores, medians of "
              f"{args.repeats} fresh processes each, interleaved; the wheel's build took {build_s:.0f} s")
    table = header + "\n\n" + "\n".join(lines) + "\n"
    print("\n" + table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "build_seconds": build_s, "rows": rows,
                                    "medians": median, "table": table}, indent=1))


if __name__ == "__main__":
    main()
