#!/usr/bin/env python3
"""Every supported torch, end to end: build the sample's wheel, install it elsewhere, start warm.

    python3 scripts/torch_matrix.py [VERSION ...] [--find-links DIR] [--out matrix-out] [--keep]

For each torch version (default: every minor release hatch-precompile supports, newest patch):

1. a build venv with that torch, ``build``, ``hatchling`` and this checkout; the sample's wheel
   built there (``python -m build --wheel --no-isolation``);
2. a second venv at another path (a hard-linked copy of the first when the filesystem allows,
   else a fresh install), with the wheel installed: torch lives elsewhere than at build time;
3. ``python -m sample_pkg --json`` there in fresh processes with empty cache dirs, cold
   (``PRECOMPILE=0``) and from the precompiled artifacts: as built, at 8 threads
   (``torch.set_num_threads(8)``), at ``OMP_NUM_THREADS=1``, and with a stand-in compiler (a
   ``g++`` at another path that answers ``--version`` as another release).

Writes ``<out>/results.json`` and ``<out>/matrix.md`` (the table the docs show) and prints it.
Standard library only. Versions above a machine's pip cap need ``PIP_CONSTRAINT=/dev/null``;
torch wheels are downloaded unless ``--find-links`` has them (CUDA builds: ~3 GB each).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUPPORTED = ("2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")


def sh(*cmd, env=None, check=True) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PRECOMPILE", "HATCH_", "TORCHINDUCTOR"))}
    full_env.pop("VIRTUAL_ENV", None)
    full_env.update(env or {})
    proc = subprocess.run([str(c) for c in cmd], env=full_env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-4000:]}")
    return proc


def venv(path: Path, *packages: str, find_links: list[str]) -> Path:
    sh(sys.executable, "-m", "venv", "--clear", path)
    python = path / "bin" / "python"
    links = [arg for d in find_links for arg in ("--find-links", d)]
    sh(python, "-m", "pip", "install", "-q", *links, *packages)
    return python


def clone(build: Path, run: Path, find_links: list[str], version: str) -> Path:
    """The build venv at another path: hard links where possible (5 GB each otherwise)."""
    try:
        sh("cp", "-al", build, run)
        (run / "pyvenv.cfg").write_text((build / "pyvenv.cfg").read_text().replace(str(build), str(run)))
        return run / "bin" / "python"
    except RuntimeError:
        return venv(run, f"torch=={version}", str(ROOT), find_links=find_links)


AT_THREADS = ("import sys, runpy, torch; torch.set_num_threads({}); sys.argv = ['x', '--json']; "
              "runpy.run_module('sample_pkg', run_name='__main__')")


def sample(python: Path, env: dict[str, str], threads: int | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="matrix-cache-") as cache:
        command = ["-m", "sample_pkg", "--json"] if threads is None else ["-c", AT_THREADS.format(threads)]
        proc = sh(python, *command, env={"TORCHINDUCTOR_CACHE_DIR": cache, **env})
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stand_in_compiler(out: Path) -> Path:
    """A g++ at another path, answering --version as another release: any of the family stands in."""
    wrapper = out / "stand-in" / "g++-13"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "g++ (GCC) 13.3.0"; exit 0; fi\n'
                       f'exec {shutil.which("g++")} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def one(version: str, out: Path, find_links: list[str], keep: bool) -> dict:
    row: dict = {"torch": version}
    build_venv, run_venv = out / f"build-{version}", out / f"run-{version}"
    try:
        started = time.perf_counter()
        python = venv(build_venv, f"torch=={version}", "build", "hatchling", str(ROOT), find_links=find_links)
        row["venv_seconds"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        proc = sh(python, "-m", "build", "--wheel", "--no-isolation", "-o", out / f"dist-{version}",
                  ROOT / "sample_pkg", check=False)
        row["build_seconds"] = round(time.perf_counter() - started, 1)
        row["build_lines"] = [line for line in proc.stdout.splitlines() if "precompile:" in line]
        (out / f"build-{version}.log").write_text(proc.stdout)
        if proc.returncode != 0:
            row["build"] = f"failed (exit {proc.returncode}); see build-{version}.log"
            return row
        wheel = next((out / f"dist-{version}").glob("*.whl"))
        row["wheel"] = wheel.name
        python = clone(build_venv, run_venv, find_links, version)
        sh(python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel)
        row["cold"] = sample(python, {"PRECOMPILE": "0"})
        row["warm"] = sample(python, {})
        row["warm_8_threads"] = sample(python, {}, threads=8)
        row["warm_omp_1"] = sample(python, {"OMP_NUM_THREADS": "1"})
        row["warm_stand_in"] = sample(python, {"CXX": str(stand_in_compiler(out))})
    except Exception as exc:  # a row says what went wrong; the matrix goes on
        row["error"] = str(exc)[-2000:]
    finally:
        if not keep:
            shutil.rmtree(build_venv, ignore_errors=True)
            shutil.rmtree(run_venv, ignore_errors=True)
    return row


def verdict(row: dict) -> str:
    if "error" in row:
        return "error: " + row["error"].strip().splitlines()[-1][:120]
    if "warm" not in row:
        return row.get("build", "?")
    cold = row["cold"]
    for key in ("warm", "warm_8_threads", "warm_omp_1", "warm_stand_in"):
        if key not in row:
            continue
        warm = row[key]
        aot = warm["aot_autograd"]
        same = warm["loss"] == cold["loss"] and warm["logits_sum"] == cold["logits_sum"] if key == "warm" else (
            math.isclose(warm["loss"], cold["loss"], rel_tol=1e-5))  # another thread count sums in another order
        if not (warm["precompiled"] and aot.get("autograd_cache_hit", 0) >= 2 and not aot.get("autograd_cache_miss")
                and warm["kernels_compiled"] == 0 and same):
            return f"**fails** ({key}): {warm['precompile_reason']}, AOTAutograd {aot}, {warm['kernels_compiled']} .so"
    return "**works**"


def _warm_cell(row: dict, key: str) -> str:
    warm = row.get(key)
    if warm is None:
        return "-"
    aot = warm["aot_autograd"]
    return (f"{aot.get('autograd_cache_hit', 0)} / {aot.get('autograd_cache_miss', 0)}, {warm['kernels_compiled']} .so, "
            f"{warm['first_step_seconds']:.2f} s")


def table(rows: list[dict]) -> str:
    lines = [
        "| torch | build | first step cold | first step precompiled | AOTAutograd hits / misses | kernels compiled "
        "| outputs = cold | at 8 threads | at `OMP_NUM_THREADS=1` | stand-in g++ | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        warm, cold = row.get("warm"), row.get("cold")
        if warm is None or cold is None:
            lines.append(f"| {row['torch']} | {row.get('build_seconds', '-')} s | - | - | - | - | - | - | - | - | {verdict(row)} |")
            continue
        aot = warm["aot_autograd"]
        same = warm["loss"] == cold["loss"] and warm["logits_sum"] == cold["logits_sum"]
        lines.append(
            f"| {warm['torch']} | {row['build_seconds']} s | {cold['first_step_seconds']:.2f} s | "
            f"{warm['first_step_seconds']:.2f} s | {aot.get('autograd_cache_hit', 0)} / {aot.get('autograd_cache_miss', 0)} | "
            f"{warm['kernels_compiled']} | {'bit for bit' if same else 'NO'} | {_warm_cell(row, 'warm_8_threads')} | "
            f"{_warm_cell(row, 'warm_omp_1')} | {_warm_cell(row, 'warm_stand_in')} | {verdict(row)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=list(SUPPORTED))
    parser.add_argument("--find-links", action="append", default=[], help="a dir of torch wheels (repeatable)")
    parser.add_argument("--out", type=Path, default=ROOT / "matrix-out")
    parser.add_argument("--keep", action="store_true", help="keep the venvs (about 10 GB per CUDA torch)")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for version in args.versions:
        print(f"- torch {version} ...", flush=True)
        rows.append(one(version, out, args.find_links, args.keep))
        print(f"  {verdict(rows[-1])}", flush=True)
        (out / "results.json").write_text(json.dumps(rows, indent=1))
    header = (f"Measured {time.strftime('%Y-%m-%d')} by `scripts/torch_matrix.py` on {platform.machine()}, "
              f"Python {platform.python_version()}, {os.cpu_count()} cores:\n\n")
    (out / "matrix.md").write_text(header + table(rows))
    print("\n" + header + table(rows))


if __name__ == "__main__":
    main()
