#!/usr/bin/env python3
"""The main job: build sample_pkg with and without precompilation and compare first steps.

Standard library only; creates everything it needs under ``demo-out/`` (or ``--out``):

1. a build venv with torch, hatchling and this checkout of hatch-precompile;
2. two wheels of sample_pkg built there: precompiled, and with ``PRECOMPILE=0``;
3. a fresh venv per wheel (torch lives at another path than in the build venv, as it would on
   a user's machine), each started with an empty ``TORCHINDUCTOR_CACHE_DIR``;
4. a table of the first training step (the shipped loss step where it runs), inference call and served call of each.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH = os.environ.get("DEMO_TORCH", "torch==2.13.0")


def sh(*cmd, env=None, quiet=True, cwd=None) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PRECOMPILE")}
    full_env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    full_env.update(env or {})
    proc = subprocess.run([str(c) for c in cmd], env=full_env, text=True, capture_output=quiet, cwd=cwd)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{(proc.stdout or '')[-4000:]}{(proc.stderr or '')[-4000:]}")
    return proc.stdout or ""


def venv(path: Path, *packages) -> Path:
    print(f"- venv {path.name}: installing {' '.join(map(str, packages))}", flush=True)
    sh(sys.executable, "-m", "venv", "--clear", path)
    python = path / "bin" / "python"
    sh(python, "-m", "pip", "install", "-q", *packages)
    return python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "demo-out")
    args = parser.parse_args()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)

    builder = venv(out / "build-venv", TORCH, "build", "hatchling", f"{ROOT}[publish]")
    wheels, build_seconds = {}, {}
    for kind, switch in [("precompiled", "1"), ("plain", "0")]:
        print(f"- building sample_pkg wheel: {kind} (PRECOMPILE={switch})", flush=True)
        started = time.perf_counter()
        sh(builder, "-m", "build", "--wheel", "--no-isolation", "-o", out / kind, ROOT / "sample_pkg",
           env={"PRECOMPILE": switch}, quiet=False)
        build_seconds[kind] = time.perf_counter() - started
        wheels[kind] = next((out / kind).glob("*.whl"))

    results = {}
    for kind, wheel in wheels.items():
        python = venv(out / f"run-{kind}", TORCH, ROOT, wheel)
        with tempfile.TemporaryDirectory(prefix="demo-cache-") as tmp:
            print(f"- running python -m sample_pkg ({kind} wheel, empty cache dir)", flush=True)
            # Not in the cache dir: `-m` puts the working dir on sys.path, where a cache shard named
            # like a module torch tries to import (`z3/`) would shadow it.
            cache = os.path.join(tmp, "cache")
            line = sh(python, "-m", "sample_pkg", "--json", env={"TORCHINDUCTOR_CACHE_DIR": cache}, cwd=tmp)
            results[kind] = json.loads(line.strip().splitlines()[-1])

    print()
    print(f"{'wheel':<13}{'size':>10}{'build':>9}{'1st step':>10}{'1st infer':>11}{'1st served':>12}"
          f"{'AOT hit/miss':>14}{'kernels built':>15}")
    for kind, r in results.items():
        aot = r["aot_autograd"]
        print(
            f"{kind:<13}{wheels[kind].stat().st_size / 1e6:>8.2f}MB{build_seconds[kind]:>8.1f}s"
            f"{r['first_step_seconds']:>9.2f}s{r['first_predict_seconds']:>10.2f}s{r['first_classify_seconds']:>11.3f}s"
            f"{aot.get('autograd_cache_hit', 0):>8}/{aot.get('autograd_cache_miss', 0):<5}{r['kernels_compiled']:>15}"
        )
    cold, warm = results["plain"], results["precompiled"]
    print(f"\nfirst training step: {cold['first_step_seconds'] / warm['first_step_seconds']:.1f}x faster "
          f"precompiled; same loss: {cold['loss']:.6f} vs {warm['loss']:.6f}")
    traced = warm.get("first_predict_phases", {}).get("frames")
    print(f"first inference call (a plain torch.compile of the model): {warm['first_predict_seconds']:.2f} s "
          f"precompiled, {'served from its Dynamo cache entry, nothing traced' if traced == 0 else 'traced by Dynamo'}; "
          f"{cold['first_predict_seconds']:.2f} s compiled cold")
    print(f"first served call (sample_pkg.classify_step, batch 7): {warm['first_classify_seconds'] * 1e3:.1f} ms by "
          f"{warm['classify_route']} (nothing compiled), against {cold['first_classify_seconds']:.2f} s compiled cold")
    print(f"measured with torch {warm['torch']}, Python {platform.python_version()}, {os.cpu_count()} cores, {_cpu()}")
    (out / "results.json").write_text(json.dumps(results, indent=1))


def _cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
