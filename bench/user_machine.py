#!/usr/bin/env python3
"""Warm on the user's machine, not a copy of the builder's: the first step under each difference,
and what the shipped kernels cost at steady state, before and after, in one run.

    python3 bench/user_machine.py [--before GIT_REF] [--projects sample_pkg tiny_transformer]
                                  [--steps 200] [--out bench-out/user-machine]

For each hatch-precompile version (``--before``, a git ref of this repository, and this checkout):

1. the project's wheel built in a venv with torch (its build time and size);
2. the wheel installed into a fresh venv; its first compiled training step in fresh processes
   with an empty cache dir, one row per way the user's machine differs from the builder's: none,
   ``torch.set_num_threads(8)``, ``OMP_NUM_THREADS=1``, ``CXX=g++-12`` (the same compiler under
   its versioned name), another distribution's g++ (a ``g++`` first on PATH answering
   ``--version`` as Ubuntu's 13.3), and ``CXX=g++-11`` where installed: AOTAutograd hits and
   misses, shared objects built (kernels and ISA probes), seconds, what load() said;

and for this checkout, the steady state: in one process per project and thread count (1, 2), the
shipped kernels (a package's compiled step after load()) against kernels compiled natively for
that setting (another instance compiled with ``cpp.dynamic_threads`` off, so specialised for the
thread count, and ``-march=native``), and against what load()'s process-wide setting gives the
rest of the process (a third instance compiled there, caches off: dynamic threads,
``-march=native``), stepped in turn, medians. Prints the tables and writes
``results.json``. Standard library only.
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
PROJECTS = {"sample_pkg": ROOT / "sample_pkg", "tiny_transformer": ROOT / "bench" / "projects" / "tiny_transformer"}
TORCH = os.environ.get("BENCH_TORCH", "torch==2.13.0")
BEFORE = "30e1331"  # the last commit before kernels took the process's threads and any compiler of the family

FIRST_STEP = r"""
import json, sys, time, pathlib, importlib, torch
{setup}
from torch._dynamo.utils import counters
from torch._inductor.runtime.cache_dir_utils import cache_dir
pkg = importlib.import_module(sys.argv[1])  # load() installs the shipped kernels: not built here
bench = importlib.import_module(sys.argv[1] + ".bench")
before = sum(1 for _ in pathlib.Path(cache_dir()).rglob("*.so"))
t0 = time.perf_counter(); loss = bench.train_step(); seconds = time.perf_counter() - t0
status = getattr(pkg, "precompile_status", None) or __import__("hatch_precompile").load(sys.argv[1])
print(json.dumps({"seconds": seconds, "aot": dict(counters["aot_autograd"]), "loss": float(loss),
                  "so_built": sum(1 for _ in pathlib.Path(cache_dir()).rglob("*.so")) - before,
                  "reason": status.reason, "threads": torch.get_num_threads()}))
"""

STEADY = r"""
import json, statistics, sys, time, importlib, torch
from torch._inductor import config
name, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pkg = importlib.import_module(name)
model = importlib.import_module(name + ".model")
torch.set_num_threads(threads)
batch = model.make_batch()
shipped = model.Trainer(model.make_model())
shipped.step(*batch); shipped.predict(batch[0])  # from the shipped caches (load() ran at import)
native = model.Trainer(model.make_model())
with config.patch({"cpp.dynamic_threads": False}):  # compiled here, for this thread count
    native.step(*batch); native.predict(batch[0])
# The rest of the process: load() turned dynamic threads on for every compile, its own too.
rest = model.Trainer(model.make_model())
from torch._functorch import config as functorch_config
with config.patch({"fx_graph_cache": False}), functorch_config.patch({"enable_autograd_cache": False}):
    rest.step(*batch); rest.predict(batch[0])
trainers = {"shipped": shipped, "native": native, "rest": rest}
for trainer in trainers.values():
    for _ in range(5): trainer.step(*batch)
times = {label: [] for label in trainers}
for _ in range(steps):  # in turn, so that all see the same machine
    for label, trainer in trainers.items():
        t0 = time.perf_counter(); trainer.step(*batch); times[label].append(time.perf_counter() - t0)
print(json.dumps({label: statistics.median(v) for label, v in times.items()}))
"""


def sh(*cmd, env=None, cwd=None, check=True) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PRECOMPILE", "HATCH_", "TORCHINDUCTOR", "CXX"))}
    full_env.pop("VIRTUAL_ENV", None)
    full_env.update(env or {})
    proc = subprocess.run([str(c) for c in cmd], env=full_env, cwd=cwd, text=True, capture_output=True)
    if check and proc.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def checkout(ref: str | None, out: Path) -> Path:
    if ref is None:
        return ROOT
    source = out / f"src-{ref}"
    if not source.exists():
        source.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    return source


def venv(path: Path, *packages) -> Path:
    sh(sys.executable, "-m", "venv", "--clear", path)
    sh(path / "bin" / "python", "-m", "pip", "install", "-q", *packages)
    return path / "bin" / "python"


def machine_rows(out: Path) -> dict[str, tuple[dict, str]]:
    """(environment, thread setup code) per row of the table."""
    other = out / "other-distro-gxx"
    other.mkdir(exist_ok=True)
    (other / "g++").write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "g++ (Ubuntu 13.3.0-6ubuntu2~24.04) '
                               f'13.3.0"; exit 0; fi\nexec {shutil.which("g++")} "$@"\n')
    (other / "g++").chmod(0o755)
    rows = {
        "nothing (the builder's setup)": ({}, ""),
        "8 threads (torch.set_num_threads(8))": ({}, "torch.set_num_threads(8)"),
        "1 thread (OMP_NUM_THREADS=1)": ({"OMP_NUM_THREADS": "1"}, ""),
    }
    if shutil.which("g++-12"):  # Debian 12's g++ is g++-12
        rows["g++ under its versioned name (CXX=g++-12)"] = ({"CXX": "g++-12"}, "")
    rows["another distribution's g++ (13.3, first on PATH)"] = ({"PATH": f"{other}:{os.environ['PATH']}"}, "")
    if shutil.which("g++-11"):
        rows["another g++ version (CXX=g++-11)"] = ({"CXX": "g++-11"}, "")
    return rows


def measure_version(label: str, ref: str | None, project: str, out: Path) -> dict:
    source = checkout(ref, out)
    work = out / f"{label}-{project}"
    builder = venv(work / "build-venv", TORCH, "build", "hatchling", f"{source}[publish]")
    started = time.perf_counter()
    sh(builder, "-m", "build", "--wheel", "--no-isolation", "-o", work / "dist", PROJECTS[project])
    build_seconds = time.perf_counter() - started
    (wheel,) = (work / "dist").glob("*.whl")
    runtime = venv(work / "run-venv", TORCH, source, wheel)
    rows = {}
    for row, (env, setup) in machine_rows(out).items():
        with tempfile.TemporaryDirectory(prefix="user-machine-") as tmp:
            # Not in the cache dir: `-c` puts the working dir on sys.path, where a cache shard named
            # like a module torch imports (`z3/`) would shadow it.
            proc = sh(runtime, "-c", FIRST_STEP.replace("{setup}", setup), project,
                      env={"TORCHINDUCTOR_CACHE_DIR": f"{tmp}/cache", **env}, cwd=tmp)
        rows[row] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"  {label} {project}: {row}: {rows[row]['seconds']:.2f} s", flush=True)
    return {"build_seconds": build_seconds, "wheel_bytes": wheel.stat().st_size, "wheel": wheel.name,
            "runtime": str(runtime), "rows": rows}


def steady(runtime: str, project: str, steps: int) -> dict:
    found = {}
    for threads in (1, 2):
        with tempfile.TemporaryDirectory(prefix="user-machine-steady-") as tmp:  # cwd: not the cache dir (above)
            proc = sh(runtime, "-c", STEADY, project, threads, steps, env={"TORCHINDUCTOR_CACHE_DIR": f"{tmp}/cache"},
                      cwd=tmp)
        found[threads] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--projects", nargs="+", default=list(PROJECTS), choices=list(PROJECTS))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "user-machine")
    args = parser.parse_args()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    results = {"cpu": cpu, "cores": os.cpu_count(), "torch": TORCH, "projects": {}}
    for project in args.projects:
        before = measure_version(f"before-{args.before}", args.before, project, out)
        after = measure_version("after", None, project, out)
        after["steady"] = steady(after["runtime"], project, args.steps)
        results["projects"][project] = {"before": before, "after": after}
        report(project, args.before, before, after)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\n{cpu}, {os.cpu_count()} cores, {TORCH}; raw results: {out / 'results.json'}")


def report(project: str, ref: str, before: dict, after: dict) -> None:
    print(f"\n{project}: the user's machine differs in | AOTAutograd hit/miss | .so built | first step | load()"
          f"   (before {ref} -> after)")
    for row in after["rows"]:
        cells = []
        for r in (before["rows"][row], after["rows"][row]):
            aot = r["aot"]
            cells.append((f"{aot.get('autograd_cache_hit', 0)}/{aot.get('autograd_cache_miss', 0)}",
                          str(r["so_built"]), f"{r['seconds']:.2f} s", r["reason"][:60]))
        print(f"  {row}: " + " | ".join(f"{a} -> {b}" for a, b in zip(*cells)))
    print(f"  build: {before['build_seconds']:.1f} s -> {after['build_seconds']:.1f} s; wheel "
          f"{before['wheel_bytes'] / 1e6:.2f} MB -> {after['wheel_bytes'] / 1e6:.2f} MB ({after['wheel']})")
    for threads, medians in after["steady"].items():
        print(f"  steady state at {threads} thread(s): shipped {medians['shipped'] * 1e3:.3f} ms, compiled natively "
              f"for it {medians['native'] * 1e3:.3f} ms: {medians['shipped'] / medians['native']:.3f}x; the rest of the "
              f"process (dynamic threads, -march=native) {medians['rest'] * 1e3:.3f} ms: "
              f"{medians['rest'] / medians['native']:.3f}x")


if __name__ == "__main__":
    main()
