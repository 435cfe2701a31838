#!/usr/bin/env python3
"""A fresh container's first process against a long-lived machine's tenth, side by side.

    python3 bench/fresh_container.py [--project sample_pkg] [--repeats 3] [--out bench-out/fresh-container]

The sample's precompiled wheel is built once. Then, ``--repeats`` times and for each arm (the
speedups on, as users get them, and off with ``HATCH_PRECOMPILE_NO_PATCHES=1``: what a fresh
container paid without them), alternating which arm goes first: a new venv gets torch,
hatch-precompile and the wheel (the first process in a new venv), and the first compiled training
step is timed in ten fresh processes in a row, each with an empty ``TORCHINDUCTOR_CACHE_DIR``,
all with one ``HOME`` (and ``TMPDIR`` in it) that is empty before the first (a fresh container:
no user cache, no memo of anything) and only PATH set besides. Prints, per arm, the medians of the
first process and of the tenth, and writes ``results.json``. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
    sh(builder, "-m", "pip", "install", "-q", TORCH, "build", "hatchling", f"{ROOT}[publish]", env=clean)
    sh(builder, "-m", "build", "--wheel", "--no-isolation", "-o", out / "dist", PROJECTS[args.project], env=clean)
    (wheel,) = (out / "dist").glob("*.whl")
    arms = {"speedups on": {}, "speedups off": {"HATCH_PRECOMPILE_NO_PATCHES": "1"}}
    runs: dict[str, list[list[float]]] = {arm: [] for arm in arms}
    for repeat in range(args.repeats):
        for arm in (list(arms) if repeat % 2 == 0 else list(reversed(arms))):
            venv = out / f"venv-{repeat}-{arm.split()[-1]}"
            sh(sys.executable, "-m", "venv", venv, env=clean)
            sh(venv / "bin" / "python", "-m", "pip", "install", "-q", TORCH, ROOT, wheel, env=clean)
            home = Path(tempfile.mkdtemp(prefix="fresh-home-", dir=out))
            (home / "tmp").mkdir()  # a container's own /tmp: no header or probe another process built
            seconds = []
            for _ in range(10):
                with tempfile.TemporaryDirectory(prefix="fresh-cache-", dir=out) as cache:
                    container = {"PATH": os.environ["PATH"], "HOME": str(home), "TMPDIR": str(home / "tmp"),
                                 "TORCHINDUCTOR_CACHE_DIR": cache, **arms[arm]}
                    result = json.loads(sh(venv / "bin" / "python", "-c", STEP, args.project, env=container,
                                           cwd=home).strip().splitlines()[-1])
                assert result["loaded"], "the shipped artifacts were not used"
                seconds.append(result["seconds"])
            runs[arm].append(seconds)
            shutil.rmtree(venv)
            print(f"- {arm}, venv {repeat}: first process {seconds[0]:.2f} s, then "
                  + ", ".join(f"{s:.2f}" for s in seconds[1:]), flush=True)
    summary = {"torch": TORCH, "project": args.project, "cpu": cpu_model(), "cores": os.cpu_count(),
               "runs": runs, "when": time.strftime("%Y-%m-%d %H:%M")}
    print(f"\n{args.project}, {TORCH}, {summary['cpu']}, {os.cpu_count()} cores: first compiled training step, "
          f"medians of {args.repeats} new venvs with an empty home")
    for arm, series in runs.items():
        first, tenth = statistics.median(s[0] for s in series), statistics.median(s[-1] for s in series)
        summary[arm] = {"first_median": first, "tenth_median": tenth}
        print(f"  {arm:<13} first process {first:.2f} s, tenth {tenth:.2f} s ({first / tenth:.2f}x)")
    (out / "results.json").write_text(json.dumps(summary, indent=1))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
