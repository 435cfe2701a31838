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
   ``g++`` at another path that answers ``--version`` as another release);
4. the speed: the precompiled first step and the compile-off floor (``TORCH_COMPILE_DISABLE=1``),
   medians of fresh processes; a torch whose precompiled step adds more than 1.3x over its floor
   what the best torch's adds over its own is named in the table; how much of that is Dynamo
   tracing the step (torch's own work, from its compilation metrics) and the same test for the
   rest; and whether the warm start computed Triton's key (a CUDA build's 0.4 s of hashing), seen
   by a profiler in an untimed run.

With ``--exported``, the sample's exported step (its ``classify``, an AOTInductor package) instead,
across versions: each torch builds the sample's wheel (proving the sample still builds there) and
keeps that step's package; then every torch loads every package, as load_step would
(run/steps/exported_step.py), and runs it against eager ``classify``: which build -> run pairs load and match,
and what the loader said where not. Writes ``<out>/exported.json`` and ``<out>/exported.md``.

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
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Each minor release's newest patch; 2.13.0 both as this machine's CPU build and as PyPI's default
# (CUDA) build, the one `pip install torch` gives Linux users.
SUPPORTED = ("2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.13.0:pypi", "2.14.1", "2.15.0")
RUNS = 5  # fresh processes per speed figure; the table shows their median (3 left the spread as wide as the 1.3x)
SLOWER = 1.3  # a torch whose warm step adds this much more over its floor than the best one's is a failure


def sh(*cmd, env=None, check=True, cwd=None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PRECOMPILE", "HATCH_", "TORCHINDUCTOR"))}
    full_env.pop("VIRTUAL_ENV", None)
    full_env.update(env or {})
    proc = subprocess.run([str(c) for c in cmd], env=full_env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, cwd=cwd)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-4000:]}")
    return proc


def venv(path: Path, *packages: str, find_links: list[str]) -> Path:
    """A venv with ``packages``; ``torch==X:pypi`` takes PyPI's build of X (its CUDA one on Linux),
    whatever this machine's pip configuration offers first."""
    sh(sys.executable, "-m", "venv", "--clear", path)
    python = path / "bin" / "python"
    links = [arg for d in find_links for arg in ("--find-links", d)]
    pypi = any(p.endswith(":pypi") for p in packages)
    packages = tuple(p.removesuffix(":pypi") for p in packages)
    sh(python, "-m", "pip", *(["--isolated"] if pypi else []), "install", "-q", *([] if pypi else links), *packages)
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


# Whether Triton's own key (a CUDA build's 0.4 s of hashing) was computed, in any thread, by a warm
# start: needed only where torch keys the graphs on it. The profiler slows this run; it is not timed.
TRITON_HASHED = (
    "import json, runpy, sys, threading\nseen = []\n"
    "def profile(frame, event, arg):\n"
    "    if event == 'call' and frame.f_code.co_name == 'triton_key' and '/triton/' in frame.f_code.co_filename:\n"
    "        seen.append(frame.f_code.co_filename)\n"
    "sys.setprofile(profile); threading.setprofile(profile); sys.argv = ['x', '--json']\n"
    "try:\n    runpy.run_module('sample_pkg', run_name='__main__')\n"
    "finally:\n    sys.setprofile(None); threading.setprofile(None); print(json.dumps({'triton_hashed': bool(seen)}))\n"
)


def sample(python: Path, env: dict[str, str], threads: int | None = None, code: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="matrix-cache-") as tmp:
        cache = os.path.join(tmp, "cache")
        if code is None:
            code = None if threads is None else AT_THREADS.format(threads)
        command = ["-m", "sample_pkg", "--json"] if code is None else ["-c", code]
        # Not this checkout's dir, nor the cache dir: `-m`/`-c` put the working dir on sys.path, and a
        # cache shard named like a module torch tries to import (`z3/`) shadows it.
        proc = sh(python, *command, env={"TORCHINDUCTOR_CACHE_DIR": cache, **env}, cwd=tmp)
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
    label = version.replace(":", "-")
    build_venv, run_venv = out / f"build-{label}", out / f"run-{label}"
    try:
        started = time.perf_counter()
        python = venv(build_venv, f"torch=={version}", "build", "hatchling", f"{ROOT}[publish]", find_links=find_links)
        row["venv_seconds"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        proc = sh(python, "-m", "build", "--wheel", "--no-isolation", "-o", out / f"dist-{label}",
                  ROOT / "sample_pkg", check=False)
        row["build_seconds"] = round(time.perf_counter() - started, 1)
        row["build_lines"] = [line for line in proc.stdout.splitlines() if "precompile:" in line]
        (out / f"build-{label}.log").write_text(proc.stdout)
        if proc.returncode != 0:
            row["build"] = f"failed (exit {proc.returncode}); see build-{label}.log"
            return row
        wheel = next((out / f"dist-{label}").glob("*.whl"))
        row["wheel"] = wheel.name
        python = clone(build_venv, run_venv, find_links, version)
        sh(python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel)
        row["cold"] = sample(python, {"PRECOMPILE": "0"})
        row["warm"] = sample(python, {})
        # Speed: medians of fresh processes, each against this torch's own compile-off floor.
        warm_runs = [row["warm"]] + [sample(python, {}) for _ in range(RUNS - 1)]
        row["warm_runs"] = [run["first_step_seconds"] for run in warm_runs]
        row["warm_phases"] = [run.get("first_step_phases", {}) for run in warm_runs]
        row["floor_runs"] = [sample(python, {"PRECOMPILE": "0", "TORCH_COMPILE_DISABLE": "1"})["first_step_seconds"]
                             for _ in range(RUNS)]
        row["warm_8_threads"] = sample(python, {}, threads=8)
        row["warm_omp_1"] = sample(python, {"OMP_NUM_THREADS": "1"})
        row["warm_stand_in"] = sample(python, {"CXX": str(stand_in_compiler(out))})
        row["triton_hashed"] = sample(python, {}, code=TRITON_HASHED)["triton_hashed"]
    except Exception as exc:  # a row says what went wrong; the matrix goes on
        row["error"] = str(exc)[-2000:]
    finally:
        if not keep:
            shutil.rmtree(build_venv, ignore_errors=True)
            shutil.rmtree(run_venv, ignore_errors=True)
    return row


def _same_as_cold(warm: dict, cold: dict) -> str | None:
    """How the warm outputs equal the cold ones, or None. Bit for bit from the caches; where the
    training step ran by its exported package, its gradients round otherwise than the compiled
    backward's, and predict after that step is compared within 1e-6."""
    if warm["loss"] == cold["loss"] and warm["logits_sum"] == cold["logits_sum"]:
        return "bit for bit"
    if warm.get("step_route") == "aotinductor" and math.isclose(warm["loss"], cold["loss"], rel_tol=1e-6) and (
            math.isclose(warm["logits_sum"], cold["logits_sum"], rel_tol=1e-6)):
        return "within 1e-6"
    return None


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
        same = _same_as_cold(warm, cold) if key == "warm" else (
            math.isclose(warm["loss"], cold["loss"], rel_tol=1e-5))  # another thread count sums in another order
        # The training step ran by its exported loss package where this torch exports it (no graph
        # of its own then); else from the caches: its graph and predict's hit.
        graphs = 1 if warm.get("step_route") == "aotinductor" else 2
        if not (warm["precompiled"] and aot.get("autograd_cache_hit", 0) >= graphs and not aot.get("autograd_cache_miss")
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


def speed(row: dict) -> tuple[float, float, float] | None:
    """(warm median, compile-off floor median, what the compiled path adds over the floor), or None."""
    if not row.get("warm_runs") or not row.get("floor_runs"):
        return None
    warm, floor = statistics.median(row["warm_runs"]), statistics.median(row["floor_runs"])
    return warm, floor, warm - floor


def tracing(row: dict) -> float | None:
    """Median seconds Dynamo spent tracing the warm first step (torch's own work, which no cache
    skips before torch 2.14's precompile), or None where the sample could not tell."""
    found = [phases["dynamo_seconds"] for phases in row.get("warm_phases", []) if "dynamo_seconds" in phases]
    return statistics.median(found) if found else None


def speed_table(rows: list[dict]) -> str:
    """Each torch's warm first step over its own compile-off floor; one too far from the best is named.

    The floor (the eager first step, 0.02-0.3 s) is subtracted, not divided by: a ratio to a
    tenth of a second measures the floor's noise, not the warm start."""
    measured = {row["warm"]["torch"]: speed(row) for row in rows if speed(row)}
    if not measured:
        return ""
    # Compared within a route: a training step served by its exported package (no Dynamo) is
    # faster than the compile-off floor, one from the caches is not.
    best_by_route: dict[str, float] = {}
    for row in rows:
        if (found := speed(row)) is not None:
            route = row["warm"].get("step_route") or "-"
            best_by_route[route] = min(best_by_route.get(route, found[2]), found[2])
    # The same test for what is left once Dynamo's tracing is taken out: the cache load and the rest.
    rests = [found[2] - traced for row in rows if (found := speed(row)) and (traced := tracing(row)) is not None]
    best_rest = min(rests) if rests else None
    lines = ["| torch | first step cold | precompiled (median) | compile-off floor (median) | precompiled - floor | "
             "against the best | of it, Dynamo tracing | the rest | the rest against the best | Triton hashed |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        found = speed(row)
        if not found:
            continue
        warm, floor, added = found
        best = best_by_route[row["warm"].get("step_route") or "-"]
        if added <= 0:
            verdict_ = f"ok (by {row['warm'].get('step_route')}: faster than its floor)"
        else:
            verdict_ = "ok" if added <= SLOWER * best else f"**slow: {added / best:.2f}x the best's**"
        traced = tracing(row)
        if traced is None or best_rest is None or best_rest <= 0:
            traced_cell, rest_cell, rest_verdict = "-", "-", "-"
        else:
            rest = added - traced
            traced_cell, rest_cell = f"{traced:.2f} s", f"{rest:.2f} s"
            rest_verdict = "ok" if rest <= SLOWER * best_rest else f"**slow: {rest / best_rest:.2f}x the best's**"
        lines.append(f"| {row['warm']['torch']} | {row['cold']['first_step_seconds']:.2f} s | {warm:.2f} s | "
                     f"{floor:.2f} s | {added:.2f} s | {verdict_} | {traced_cell} | {rest_cell} | {rest_verdict} | "
                     f"{_yes_no(row.get('triton_hashed'))} |")
    return "\n".join(lines) + "\n"


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


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
        same = _same_as_cold(warm, cold)
        lines.append(
            f"| {warm['torch']} | {row['build_seconds']} s | {cold['first_step_seconds']:.2f} s | "
            f"{warm['first_step_seconds']:.2f} s | {aot.get('autograd_cache_hit', 0)} / {aot.get('autograd_cache_miss', 0)} | "
            f"{warm['kernels_compiled']} | {same or 'NO'} | {_warm_cell(row, 'warm_8_threads')} | "
            f"{_warm_cell(row, 'warm_omp_1')} | {_warm_cell(row, 'warm_stand_in')} | {verdict(row)} |"
        )
    return "\n".join(lines) + "\n"


# Runs under the torch to test, with this checkout first on sys.path: load the package one torch
# built, as load_step would, and run it against eager classify. argv: step dir.
PAIR = r"""
import json, os, sys, time
step_dir = sys.argv[1]
import torch
from hatch_precompile.errors import StepRefused
from hatch_precompile.run.steps import exported_step
from sample_pkg.model import classify, make_batch, make_model
record = json.load(open(os.path.join(step_dir, "classify.json")))
package = open(os.path.join(step_dir, "classify.pt2"), "rb").read()
constants = os.path.join(step_dir, "classify.constants")
shipped = open(constants, "rb").read() if os.path.exists(constants) else None
model, images = make_model().eval(), make_batch(7, seed=5)[0]
out = {"torch": torch.__version__, "built": record["torch"]}
try:
    started = time.perf_counter()
    step = exported_step.ExportedStep("classify", record["export"], package, shipped)
    out["load_seconds"] = time.perf_counter() - started
    with torch.no_grad():
        started = time.perf_counter()
        got = step.call((model, images))
        out["first_call_seconds"] = time.perf_counter() - started
        out["error"] = (got - classify(model, images)).abs().max().item()
except StepRefused as exc:
    out["refused"] = str(exc)
except Exception as exc:
    out["failed"] = repr(exc)[:500]
print(json.dumps(out))
"""


def exported_build(version: str, out: Path, find_links: list[str]) -> dict:
    """The sample built under ``version``; its classify step's files kept in ``out/exported/<version>``."""
    label = version.replace(":", "-")
    row: dict = {"torch": version}
    build_venv = out / f"build-{label}"
    try:
        python = venv(build_venv, f"torch=={version}", "build", "hatchling", f"{ROOT}[publish]", find_links=find_links)
        row["torch"] = sh(python, "-c", "import torch; print(torch.__version__)").stdout.strip().splitlines()[-1]
        started = time.perf_counter()
        proc = sh(python, "-m", "build", "--wheel", "--no-isolation", "-o", out / f"dist-{label}",
                  ROOT / "sample_pkg", check=False)
        row["build_seconds"] = round(time.perf_counter() - started, 1)
        row["build_lines"] = [line for line in proc.stdout.splitlines() if "precompile:" in line and "step" in line]
        (out / f"build-{label}.log").write_text(proc.stdout)
        if proc.returncode != 0:
            row["build"] = f"failed (exit {proc.returncode}); see build-{label}.log"
            return row
        wheel = next((out / f"dist-{label}").glob("*.whl"))
        row["wheel"] = wheel.name
        sh(python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel)
        warm = sample(python, {})
        row["warm"] = {k: warm.get(k) for k in ("precompiled", "first_step_seconds", "classify_route",
                                                "classify_reason", "classify_error", "first_classify_seconds")}
        step_dir = out / "exported" / label
        step_dir.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            manifest = json.loads(next(archive.read(n) for n in archive.namelist() if n.endswith("/manifest.json")))
            for suffix in ("json", "pt2", "constants"):
                entry = manifest["files"].get(f"steps/classify.{suffix}")
                if entry:
                    (step_dir / f"classify.{suffix}").write_bytes(
                        archive.read(f"sample_pkg/_precompiled/blobs/{entry['sha256']}"))
        row["exported"] = (step_dir / "classify.pt2").is_file()
    except Exception as exc:
        row["error"] = str(exc)[-2000:]
    finally:
        shutil.rmtree(build_venv, ignore_errors=True)
    return row


def exported_runs(version: str, out: Path, find_links: list[str]) -> list[dict]:
    """Every kept package, loaded and run under ``version``."""
    label = version.replace(":", "-")
    run_venv = out / f"run-{label}"
    results = []
    try:
        python = venv(run_venv, f"torch=={version}", find_links=find_links)
        env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'sample_pkg'}"}
        for step_dir in sorted((out / "exported").iterdir()):
            with tempfile.TemporaryDirectory() as tmp:
                proc = sh(python, "-c", PAIR, step_dir, env={**env, "TORCHINDUCTOR_CACHE_DIR": tmp}, cwd=tmp,
                          check=False)
            try:
                results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                results.append({"built": step_dir.name, "failed": f"exit {proc.returncode}: {proc.stdout[-300:]}"})
    finally:
        shutil.rmtree(run_venv, ignore_errors=True)
    return results


def exported_table(builds: list[dict], pairs: list[dict]) -> str:
    built = [b["torch"] for b in builds if b.get("exported")]
    runs = sorted({p["torch"] for p in pairs if "torch" in p}, key=lambda v: [int(x) for x in v.split("+")[0].split(".")])
    lines = ["| built with \\ run on | " + " | ".join(runs) + " |", "|---" * (len(runs) + 1) + "|"]
    for source in built:
        cells = []
        for target in runs:
            found = next((p for p in pairs if p.get("built") == source and p.get("torch") == target), None)
            if found is None:
                cells.append("-")
            elif "error" in found:
                ok = found["error"] < 1e-5
                cells.append(f"{'**loads, matches**' if ok else 'loads, DIFFERS'} ({found['error']:.0e})")
            else:
                cells.append("refused: " + (found.get("refused") or found.get("failed") or "?")[:90].replace("|", "/"))
        lines.append(f"| {source} | " + " | ".join(cells) + " |")
    builds_lines = ["| torch | sample builds | exported step | served warm by | first served call |",
                    "|---|---|---|---|---|"]
    for b in builds:
        warm = b.get("warm") or {}
        built_ok = b.get("build") or b.get("error", "")[-80:] or f"yes, {b.get('build_seconds')} s"
        step = "yes" if b.get("exported") else "no: " + "; ".join(b.get("build_lines", []))[-120:]
        first = warm.get("first_classify_seconds")
        builds_lines.append(f"| {b['torch']} | {built_ok} | {step} | {warm.get('classify_route') or '-'} | "
                            f"{f'{first * 1e3:.1f} ms' if first else '-'} |")
    return "\n".join(builds_lines) + "\n\n" + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=list(SUPPORTED))
    parser.add_argument("--exported", action="store_true", help="which build -> run torch pairs an exported step "
                        "loads and matches on")
    parser.add_argument("--find-links", action="append", default=[], help="a dir of torch wheels (repeatable)")
    parser.add_argument("--out", type=Path, default=ROOT / "matrix-out")
    parser.add_argument("--keep", action="store_true", help="keep the venvs (about 10 GB per CUDA torch)")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.exported:
        versions = [v for v in args.versions if not v.endswith(":pypi")]
        builds = []
        for version in versions:
            print(f"- build with torch {version} ...", flush=True)
            builds.append(exported_build(version, out, args.find_links))
            (out / "exported.json").write_text(json.dumps({"builds": builds}, indent=1))
        pairs = []
        for version in versions:
            print(f"- run on torch {version} ...", flush=True)
            pairs += exported_runs(version, out, args.find_links)
            (out / "exported.json").write_text(json.dumps({"builds": builds, "pairs": pairs}, indent=1))
        text = (f"Measured {time.strftime('%Y-%m-%d')} by `scripts/torch_matrix.py --exported` on "
                f"{platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores:\n\n"
                + exported_table(builds, pairs))
        (out / "exported.md").write_text(text)
        print("\n" + text)
        return
    rows = []
    for version in args.versions:
        print(f"- torch {version} ...", flush=True)
        rows.append(one(version, out, args.find_links, args.keep))
        print(f"  {verdict(rows[-1])}", flush=True)
        (out / "results.json").write_text(json.dumps(rows, indent=1))
    header = (f"Measured {time.strftime('%Y-%m-%d')} by `scripts/torch_matrix.py` on {platform.machine()}, "
              f"Python {platform.python_version()}, {os.cpu_count()} cores:\n\n")
    text = header + table(rows) + "\n" + speed_table(rows)
    (out / "matrix.md").write_text(text)
    print("\n" + text)


if __name__ == "__main__":
    main()
