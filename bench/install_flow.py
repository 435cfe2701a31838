#!/usr/bin/env python3
"""The torch-first install flow, before and after: what a plain ``pip install`` of a package costs.

    python3 bench/install_flow.py [--before GIT_REF] [--out bench-out/install-flow]

A user installs torch first, then the package, with pip's default (isolated) build. For each
hatch-precompile version -- ``--before`` (a git ref of this repository; default: the last commit
before the isolated build learnt to use the target's torch) and this checkout -- in one run:

1. a fresh venv with ``torch==2.13.0`` (the user's torch);
2. ``pip install -v ./sample_pkg`` with hatch-precompile's wheel on ``--find-links``, timed;
   the wheels pip put into the isolated build env are read from its log and their bytes summed;
3. ``python -m sample_pkg --json`` in a fresh process with an empty ``TORCHINDUCTOR_CACHE_DIR``:
   the first training step, the AOTAutograd hits and misses, and kernels compiled.

Prints one table and writes ``results.json``. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH = os.environ.get("BENCH_TORCH", "torch==2.13.0")
BEFORE = "98ff70e"  # CLI: report, verify, warm, ...; the build env then resolved torch on its own
SIZE = re.compile(r"\(([\d.]+) (kB|MB|GB)\)")
UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}


def sh(*cmd, env=None, cwd=None) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PRECOMPILE", "HATCH_", "TORCH"))}
    full_env.pop("VIRTUAL_ENV", None)
    full_env.update(env or {})
    proc = subprocess.run([str(c) for c in cmd], env=full_env, cwd=cwd, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{proc.stdout[-5000:]}")
    return proc.stdout


def hp_wheel(ref: str | None, out: Path) -> Path:
    """hatch-precompile's wheel from this checkout (``ref`` None) or from a git ref of it."""
    source = ROOT
    if ref is not None:
        source = out / f"src-{ref}"
        source.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    dist = out / f"hp-{ref or 'this'}"
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, source)
    return dist


def build_env_bytes(log: str) -> tuple[int, list[str]]:
    """Bytes of the wheels pip installed into the isolated build env, from `pip install -v`'s log."""
    sections = re.findall(r"Installing (?:build|backend) dependencies: started\n(.*?)"
                          r"Installing (?:build|backend) dependencies: finished", log, re.S)
    total, names = 0, []
    for line in "\n".join(sections).splitlines():
        found = re.search(r"(?:Processing|Downloading|Using cached) (\S+\.whl)", line)
        if not found:
            continue
        name = found[1].rsplit("/", 1)[-1]
        size = SIZE.search(line)
        if size:
            total += int(float(size[1]) * UNITS[size[2]])
        elif os.path.isfile(found[1]):
            total += os.path.getsize(found[1])
        names.append(name)
    return total, names


def measure(label: str, hp_dir: Path, out: Path) -> dict:
    venv = out / f"venv-{label}"
    sh(sys.executable, "-m", "venv", "--clear", venv)
    python = venv / "bin" / "python"
    sh(python, "-m", "pip", "install", "-q", TORCH)
    project = out / f"sample_pkg-{label}"
    shutil.copytree(ROOT / "sample_pkg", project, ignore=shutil.ignore_patterns("dist", "__pycache__"))
    links = " ".join([os.environ.get("PIP_FIND_LINKS", ""), str(hp_dir)]).strip()
    print(f"- {label}: pip install ./sample_pkg into a venv with {TORCH} ...", flush=True)
    started = time.perf_counter()
    log = sh(python, "-m", "pip", "install", "-v", project, env={"PIP_FIND_LINKS": links})
    seconds = time.perf_counter() - started
    (out / f"pip-{label}.log").write_text(log)
    bytes_, wheels = build_env_bytes(log)
    line = next((l.strip() for l in log.splitlines() if "precompile: building artifacts for" in l), None)
    with tempfile.TemporaryDirectory(prefix="install-flow-cache-") as cache:
        result = json.loads(sh(python, "-m", "sample_pkg", "--json",
                               env={"TORCHINDUCTOR_CACHE_DIR": cache}).strip().splitlines()[-1])
    return {"install_seconds": seconds, "build_env_bytes": bytes_, "build_env_wheels": wheels,
            "build_line": line, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help="git ref of the version to compare against")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "install-flow")
    args = parser.parse_args()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    results = {
        f"before ({args.before})": measure("before", hp_wheel(args.before, out), out),
        "after": measure("after", hp_wheel(None, out), out),
    }
    print(f"\n{'hatch-precompile':<22}{'install':>9}{'build-env wheels':>18}{'1st step':>10}"
          f"{'AOT hit/miss':>14}{'kernels built':>15}  torch")
    for label, r in results.items():
        aot = r["aot_autograd"]
        print(f"{label:<22}{r['install_seconds']:>8.1f}s{r['build_env_bytes'] / 1e6:>15.1f} MB"
              f"{r['first_step_seconds']:>9.2f}s{aot.get('autograd_cache_hit', 0):>8}/"
              f"{aot.get('autograd_cache_miss', 0):<5}{r['kernels_compiled']:>15}  {r['torch']}")
        print(f"{'':<22}{r['precompile_reason']}")
    (out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
