#!/usr/bin/env python3
"""A fresh container's first process against a long-lived machine's tenth, side by side.

    python3 bench/fresh_container.py [--project sample_pkg] [--repeats 3] [--out bench-out/fresh-container]

The sample's precompiled wheel is built once. Then, ``--repeats`` times: a new venv gets torch,
hatch-precompile and the wheel (the first process in a new venv), and the first compiled training
step is timed in ten fresh processes in a row, each with an empty ``TORCHINDUCTOR_CACHE_DIR``,
all with one ``HOME`` (and ``TMPDIR`` in it) that is empty before the first (a fresh container:
no user cache, no memo of anything) and only PATH set besides. Prints the medians of the first process and of the
tenth, and writes ``results.json``. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH = os.environ.get("BENCH_TORCH", "torch==2.13.0")
PROJECTS = {"sample_pkg": ROOT / "sample_pkg", "tiny_transformer": ROOT / "bench" / "projects" / "tiny_transformer"}
STEP = r"""
import json, sys, time, importlib
pkg = importlib.import_module(sys.argv[1])
bench = importlib.import_module(sys.argv[1] + ".bench")
t0 = time.perf_counter(); bench.train_step(); seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "loaded": pkg.precompile_status.loaded}))
"""


def sh(*cmd, env=None, cwd=None) -> str:
    proc = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, text=True, capture_output=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default="sample_pkg", choices=list(PROJECTS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "fresh-container")
    args = parser.parse_args()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PRECOMPILE", "HATCH_", "TORCHINDUCTOR"))}
    sh(sys.executable, "-m", "venv", out / "build-venv", env=clean)
    builder = out / "build-venv" / "bin" / "python"
    sh(builder, "-m", "pip", "install", "-q", TORCH, "build", "hatchling", ROOT, env=clean)
    sh(builder, "-m", "build", "--wheel", "--no-isolation", "-o", out / "dist", PROJECTS[args.project], env=clean)
    (wheel,) = (out / "dist").glob("*.whl")
    firsts, tenths = [], []
    for repeat in range(args.repeats):
        venv = out / f"venv-{repeat}"
        sh(sys.executable, "-m", "venv", venv, env=clean)
        sh(venv / "bin" / "python", "-m", "pip", "install", "-q", TORCH, ROOT, wheel, env=clean)
        home = Path(tempfile.mkdtemp(prefix="fresh-home-", dir=out))
        (home / "tmp").mkdir()  # a container's own /tmp: no header or probe another process built
        seconds = []
        for _ in range(10):
            with tempfile.TemporaryDirectory(prefix="fresh-cache-", dir=out) as cache:
                container = {"PATH": os.environ["PATH"], "HOME": str(home), "TMPDIR": str(home / "tmp"),
                             "TORCHINDUCTOR_CACHE_DIR": cache}
                result = json.loads(sh(venv / "bin" / "python", "-c", STEP, args.project, env=container,
                                       cwd=home).strip().splitlines()[-1])
            assert result["loaded"], "the shipped artifacts were not used"
            seconds.append(result["seconds"])
        firsts.append(seconds[0])
        tenths.append(seconds[-1])
        print(f"- venv {repeat}: first process {seconds[0]:.2f} s, then "
              + ", ".join(f"{s:.2f}" for s in seconds[1:]), flush=True)
    summary = {"torch": TORCH, "project": args.project, "first": firsts, "tenth": tenths,
               "first_median": statistics.median(firsts), "tenth_median": statistics.median(tenths),
               "when": time.strftime("%Y-%m-%d %H:%M")}
    print(f"\n{args.project}, {TORCH}: first process of a new venv with an empty home "
          f"{summary['first_median']:.2f} s (median of {args.repeats}), tenth {summary['tenth_median']:.2f} s")
    (out / "results.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
