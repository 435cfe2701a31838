#!/usr/bin/env python3
"""Time to first step: precompiled wheels against cold starts and the hand recipes.

    python3 bench/ttfs.py [PROJECT[:MODULE] ...] [--repeats 3] [--paths cold,precompiled,eager] [--builds 5]
                          [--out bench-out]

For each consumer project (default: sample_pkg; any project that uses the hook and has a
``<package>.bench`` module, or the ``MODULE`` named after the project's path, with zero-argument
``train_step()`` and ``infer()`` functions that make the first call and return its output;
``bench/projects/hf_gpt2:hf_gpt2.bench_8`` is the real-library model at 8 layers):

1. builds its wheel precompiled, with ``PRECOMPILE=0`` and with plain hatchling (no hooks),
   in a build venv, timing each (the cheap builds are repeated, medians);
2. installs the precompiled and the ``PRECOMPILE=0`` wheel into fresh venvs of their own;
3. measures, in fresh processes with an empty ``TORCHINDUCTOR_CACHE_DIR`` each, alternating the
   paths every repeat: ``import pkg`` (after torch), the first compiled inference call, and TTFS
   (from before ``import torch`` to the end of the first training step) for
   cold / Mega-Cache by hand (the bytes the workload's cold run saved) / traced (the precompiled wheel
   built without its second pass: every compiled function traced at its first call, its graphs
   warm) / precompiled / the builder's hot cache dir / ``torch.compile`` with
   ``TORCH_COMPILE_DISABLE=1`` (Dynamo imported, nothing compiled) / eager (no torch.compile);
   each first call is split, from torch's own compile timers, into Dynamo's tracing, the backend
   (for a warm start: the cache loads), the rest of the frame compiles (guards) and the rest of
   the call (the kernels running, eager code), each timer read before and after the call, so that
   compile work done before it (a served entry's install at ``torch.compile``) is reported apart;
   a bench module with ``trainer()`` (a zero-argument call making one training step, optimizer
   included, and the model it trains) is trained 20 steps instead: the first step alone, the
   median steady step, the compiler modules imported when the optimizer steps first, and the
   parameters after the 20 steps against the eager program's (the training targets: from start
   <= 1.2x eager, first step <= 2x eager's, steady <= 1.05x torch.compile's);
4. prints one table with medians and ratios against cold, writes the raw numbers to
   ``<out>/results.json`` and, when matplotlib is importable, a bar chart ``<out>/ttfs.png``.
   Every ratio is taken pair by pair (bench/pairs.py): each repeat runs every path once, in turn,
   and a path's time is divided by the other's of the same repeat; the median of those ratios is
   printed with their spread (min to max, interquartile) and the number of pairs. A fresh process
   varies by +-10% here: medians of separate runs of each side would not say whether a target holds.

Standard library only (matplotlib optional). Nothing is installed outside ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pairs
import tomllib

ROOT = Path(__file__).resolve().parents[1]
TORCH = os.environ.get("BENCH_TORCH", "torch==2.13.0")
PATHS = ("cold", "megacache", "traced", "precompiled", "hot-cache", "compile-off", "eager")

# Runs inside the venv under test. argv: mode package bench-module megacache-file-or-dash eager-0-or-1
# reference-file-or-dash. A bench module with ``trainer()`` is trained STEPS steps in "train_step":
# the first is the first step, the rest are steady; the parameters after them are compared with
# the reference file's (written by the first run that names it).
HARNESS = r"""
import importlib, json, os, sys, time
mode, package, module, megacache, eager, reference = sys.argv[1:7]
STEPS = 20
t0 = time.perf_counter()
import torch
if eager == "1":
    torch.compile = lambda model=None, **kwargs: model if model is not None else (lambda m: m)
seen = {}
def before_optimizer_step(optimizer, args, kwargs):  # the step has returned its loss and gradients
    if not seen:
        seen["compiler"] = sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules)
from torch.optim.optimizer import register_optimizer_step_pre_hook
register_optimizer_step_pre_hook(before_optimizer_step)
def compile_timers():  # torch's compile timers, summed over the frames so far (names as in torch 2.7-2.15)
    try:
        from torch._dynamo.utils import compile_times
        names, values = compile_times(repr="csv", aggregate=True)
        return {name: float(value) for name, value in zip(names, values)}
    except Exception:
        return {}
t1 = time.perf_counter()
importlib.import_module(package)
t2 = time.perf_counter()
if megacache != "-":
    torch.compiler.load_cache_artifacts(open(megacache, "rb").read())
t3 = time.perf_counter()
bench = importlib.import_module(module)
extra = {}
if mode == "train_step" and hasattr(bench, "trainer"):
    compiler_before = sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules)
    step, model = bench.trainer()
    compiler_built = sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules)
    before_call = compile_timers()  # the install at torch.compile is timed too: not the call's
    started = time.perf_counter()
    out = step()
    t4 = time.perf_counter()
    steady = []
    for _ in range(STEPS - 1):
        begun = time.perf_counter()
        float(step())
        steady.append(time.perf_counter() - begun)
    params = torch.cat([p.detach().flatten().double() for p in model.parameters()])
    diff = None
    if reference != "-":
        if os.path.exists(reference):
            diff = float((params - torch.load(reference)).abs().max())
        else:
            torch.save(params, reference)
    steady.sort()
    extra = {"first_step": t4 - started, "steady_step": steady[len(steady) // 2], "steps": STEPS,
             "param_diff": diff, "compiler_at_optimizer_step": seen.get("compiler"),
             "compiler_imported_by_the_step": sorted(set(seen.get("compiler") or []) - set(compiler_built)),
             "compiler_before_trainer": compiler_before, "compiler_after_trainer": compiler_built}
else:
    before_call = compile_timers()
    started = time.perf_counter()
    out = getattr(bench, mode)()
    t4 = time.perf_counter()
from torch._dynamo.utils import counters
timers = compile_timers()
def in_call(name):  # a timer's seconds during the first call alone
    return timers.get(name, 0.0) - before_call.get(name, 0.0)
frames = in_call("_compile.compile_inner")
tracing = in_call("bytecode_tracing")
backend = in_call("OutputGraph.call_user_compiler")  # timed apart from the tracing
print(json.dumps({
    "torch_import": t1 - t0, "pkg_import": t2 - t1, "megacache_load": t3 - t2,
    "call": t4 - t3, "total": t4 - t0, "checksum": float(out.double().sum()),
    "aot_autograd": dict(counters["aot_autograd"]),
    "split": {"dynamo_tracing": tracing, "backend": backend,
              "other_compile": frames - tracing - backend, "run": (t4 - started) - frames,
              "compile_before_call": before_call.get("_compile.compile_inner", 0.0)},
    "compile_attempts": sum(1 for name in timers if name.startswith("compile_attempt_")),
    **extra,
}))
"""


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRECOMPILE", "HATCH_BUILD", "TORCH"))}
    env.update(extra)
    return env


def sh(*cmd, env=None, cwd=None) -> str:
    proc = subprocess.run([str(c) for c in cmd], env=env or clean_env(), cwd=cwd, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{proc.stdout[-5000:]}")
    return proc.stdout


def make_venv(path: Path, *packages) -> Path:
    print(f"  venv {path.name}", flush=True)
    sh(sys.executable, "-m", "venv", "--clear", path)
    python = path / "bin" / "python"
    sh(python, "-m", "pip", "install", "-q", *packages)
    return python


def timed_build(python: Path, project: Path, out: Path, **env: str) -> tuple[float, Path]:
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    sh(python, "-m", "build", "--wheel", "--no-isolation", "-o", out, project, env=clean_env(**env))
    return time.perf_counter() - started, next(out.glob("*.whl"))


def measure(python: Path, mode: str, package: str, module: str, *, env=None, megacache="-", cache_from=None,
            eager=False, reference: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="ttfs-") as tmp:
        cache = Path(tmp) / "cache"
        if cache_from:
            shutil.copytree(cache_from, cache)
        else:
            cache.mkdir()
        out = sh(python, "-c", HARNESS, mode, package, module, megacache, "1" if eager else "0", reference or "-",
                 env=clean_env(TORCHINDUCTOR_CACHE_DIR=str(cache), **(env or {})), cwd=tmp)
        return json.loads(out.strip().splitlines()[-1])


def split_spec(spec: str) -> tuple[Path, str | None]:
    """``PATH[:MODULE]``: a project dir and, optionally, its bench module."""
    path, colon, module = spec.rpartition(":")
    if colon and path and "/" not in module:
        return Path(path).resolve(), module
    return Path(spec).resolve(), None


def bench_project(spec: str, out: Path, repeats: int, hp_wheel_dir: Path, builder: Path,
                  paths: tuple[str, ...] = PATHS, cheap_builds: int = 5) -> dict:
    project, module = split_spec(spec)
    meta = tomllib.loads((project / "pyproject.toml").read_text())
    workloads = meta["tool"]["hatch"]["build"]["hooks"]["precompile"]["workload"]
    workloads = [workloads] if isinstance(workloads, str) else workloads
    package = workloads[0].split(":")[0].split(".")[0]
    module = module or f"{package}.bench"
    label = package if module == f"{package}.bench" else module
    work = out / label
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"\n== {label} ({project})", flush=True)
    # The project's other dependencies (transformers) where its workload runs by hand, torch kept.
    others = [d for d in meta["project"].get("dependencies", [])
              if re.split(r"[\s<>=!~;\[]", d, maxsplit=1)[0].lower() not in ("torch", "hatch-precompile")]
    if others:
        sh(builder, "-m", "pip", "install", "-q", *others, TORCH)

    builds = {"precompiled": [], "off": [], "plain": []}
    seconds, wheels = timed_build(builder, project, work / "wheel-precompiled", PRECOMPILE="1")
    builds["precompiled"].append(seconds)
    for _ in range(cheap_builds):
        for kind, env in (("off", {"PRECOMPILE": "0"}), ("plain", {"HATCH_BUILD_NO_HOOKS": "true"})):
            seconds, wheel = timed_build(builder, project, work / f"wheel-{kind}", **env)
            builds[kind].append(seconds)
    plain_wheel = next((work / "wheel-off").glob("*.whl"))
    pre_wheel = wheels
    traced_wheel = None  # today's route: the caches only, each compiled function traced at its first call
    if "traced" in paths:
        _, traced_wheel = timed_build(builder, project, work / "wheel-traced", PRECOMPILE="1",
                                      HATCH_PRECOMPILE_NO_DYNAMO_CACHE="1")
    # The workload's own cold run: what the build would cost without us; its Mega-Cache bytes are
    # what the documented recipe saves and loads (the wheel ships none: nothing loads it).
    megacache = work / "megacache.bin"
    runner = (f"import importlib, torch; [getattr(importlib.import_module(m), f)() for m, f in "
              f"{[w.split(':') for w in workloads]!r}]; "
              f"open({str(megacache)!r}, 'wb').write(torch.compiler.save_cache_artifacts()[0])")
    with tempfile.TemporaryDirectory() as cache:
        started = time.perf_counter()
        sh(builder, "-c", runner, env=clean_env(TORCHINDUCTOR_CACHE_DIR=cache, PYTHONPATH=str(project)))
        workload_cold = time.perf_counter() - started
    # The builder's own hot cache dir: the workload run once more in the build venv.
    hot = work / "hot-cache"
    if "hot-cache" in paths:
        sh(builder, "-c", runner, env=clean_env(TORCHINDUCTOR_CACHE_DIR=str(hot), PYTHONPATH=str(project)))

    hp = next(hp_wheel_dir.glob("*.whl"))
    venv_pre = make_venv(work / "venv-precompiled", TORCH, hp, pre_wheel)
    venv_plain = make_venv(work / "venv-plain", TORCH, hp, plain_wheel)
    venv_traced = make_venv(work / "venv-traced", TORCH, hp, traced_wheel) if traced_wheel else None
    # Prime each venv once (pyc, page cache, the per-environment C++ header); not counted.
    for python in (venv_pre, venv_plain, venv_traced):
        if python is not None:
            measure(python, "infer", package, module)
    # The eager program's parameters after its training steps: what every path's are compared with.
    reference = work / "eager-params.pt"
    reference.unlink(missing_ok=True)
    measure(venv_plain, "train_step", package, module, eager=True, reference=reference)

    setups = {
        "cold": dict(python=venv_plain),
        "megacache": dict(python=venv_plain, megacache=str(megacache)),
        "traced": dict(python=venv_traced),  # built without the second pass: today's route
        "precompiled": dict(python=venv_pre),
        "hot-cache": dict(python=builder, cache_from=hot, env={"PYTHONPATH": str(project)}),
        # torch.compile still imports Dynamo when disabled: the floor of any torch.compile user.
        "compile-off": dict(python=venv_plain, env={"TORCH_COMPILE_DISABLE": "1"}),
        "eager": dict(python=venv_plain, eager=True),  # torch.compile never called
    }
    raw = {path: {"train_step": [], "infer": []} for path in paths}
    for repeat in range(repeats):
        for mode in ("train_step", "infer"):
            order = paths if repeat % 2 == 0 else tuple(reversed(paths))
            for path in order:
                setup = dict(setups[path])
                python = setup.pop("python")
                result = measure(python, mode, package, module, reference=reference, **setup)
                raw[path][mode].append(result)
                print(f"  {repeat + 1}/{repeats} {mode:<10} {path:<12} {result['total']:7.2f} s", flush=True)

    imports = {"with": [], "without": []}
    for _ in range(7):
        imports["with"].append(measure(venv_pre, "infer", package, module)["pkg_import"])
        imports["without"].append(measure(venv_plain, "infer", package, module)["pkg_import"])
    return {
        "package": label,
        "builds": builds,
        "workload_cold_seconds": workload_cold,
        "wheel_bytes": {"precompiled": pre_wheel.stat().st_size, "off": plain_wheel.stat().st_size},
        "runs": raw,
        "pkg_import": imports,
    }


def median(values) -> float:
    return statistics.median(values)


def paired(runs: dict, path: str, against: str, mode: str, key: str) -> list[float]:
    """``path``'s ``key`` over ``against``'s, repeat by repeat (each repeat ran every path once)."""
    return pairs.ratios([r[key] for r in runs[path][mode]], [r[key] for r in runs[against][mode]])


def summarize(result: dict) -> dict:
    runs = result["runs"]
    table = {}
    for path in runs:
        ttfs = median([r["total"] for r in runs[path]["train_step"]])
        infer = median([r["total"] for r in runs[path]["infer"]])
        table[path] = {"ttfs": ttfs, "first_infer": infer,
                       "pkg_import": median([r["pkg_import"] for r in runs[path]["train_step"]])}
        trained = [r for r in runs[path]["train_step"] if "first_step" in r]
        if trained:  # the trainer() protocol: the first step alone, steady steps, parameters, imports
            diffs = [r["param_diff"] for r in trained if r["param_diff"] is not None]
            table[path].update(first_step=median([r["first_step"] for r in trained]),
                               steady_step=median([r["steady_step"] for r in trained]),
                               param_diff=max(diffs) if diffs else None,
                               compiler_at_optimizer_step=sorted({m for r in trained
                                                                  for m in r["compiler_at_optimizer_step"] or []}),
                               compiler_after_trainer=sorted({m for r in trained for m in r["compiler_after_trainer"]}),
                               compiler_imported_by_the_step=sorted({m for r in trained
                                                                     for m in r["compiler_imported_by_the_step"]}))
        for mode in ("train_step", "infer"):  # where the first call's time went, medians per part
            splits = [r["split"] for r in runs[path][mode] if r.get("split")]
            table[path][f"split_{mode}"] = {part: median([s[part] for s in splits]) for part in splits[0]} if splits else {}
    cold = table["cold"]
    for path, row in table.items():
        row["ttfs_speedup_pairs"] = paired(runs, "cold", path, "train_step", "total")
        row["infer_speedup_pairs"] = paired(runs, "cold", path, "infer", "total")
        row["ttfs_speedup"] = statistics.median(row["ttfs_speedup_pairs"])
        row["infer_speedup"] = statistics.median(row["infer_speedup_pairs"])
    builds = {k: median(v) for k, v in result["builds"].items()}
    pre, eager = table["precompiled"], table.get("eager", {})
    training: dict[str, object] = {}
    if "first_step" in pre and "first_step" in eager:
        training = {
            "ttfs precompiled / eager program (<= 1.2x)": paired(runs, "precompiled", "eager", "train_step", "total"),
            "first step precompiled / eager's, optimizer included (<= 2x)":
                paired(runs, "precompiled", "eager", "train_step", "first_step"),
            **({"ttfs traced (no second pass) / eager program": paired(runs, "traced", "eager", "train_step", "total"),
                "first step traced / eager's": paired(runs, "traced", "eager", "train_step", "first_step")}
               if "traced" in table else {}),
            "steady step precompiled / torch.compile's (<= 1.05x)":
                paired(runs, "precompiled", "cold", "train_step", "steady_step"),
            f"params after {runs['precompiled']['train_step'][0]['steps']} steps, precompiled vs eager (max abs)":
                pre["param_diff"],
            "params, torch.compile vs eager (max abs: the spread compiling shows)": cold["param_diff"],
        }
    inference = {"first inference from start, precompiled / eager program (<= 1.2x)":
                 paired(runs, "precompiled", "eager", "infer", "total")} if "eager" in table else {}
    if "traced" in table and inference:
        inference["first inference from start, traced (no second pass) / eager program"] = paired(
            runs, "traced", "eager", "infer", "total")
    targets = {**training, **inference,
        "ttfs precompiled vs cold (>= 10x)": paired(runs, "cold", "precompiled", "train_step", "total"),
        "ttfs precompiled vs megacache (>= 3x)":
            paired(runs, "megacache", "precompiled", "train_step", "total") if "megacache" in table else None,
        "ttfs precompiled / hot cache (<= 1.2x)":
            paired(runs, "precompiled", "hot-cache", "train_step", "total") if "hot-cache" in table else None,
        "ttfs precompiled minus the torch.compile floor (s)":
            pre["ttfs"] - table["compile-off"]["ttfs"] if "compile-off" in table else None,
        "import overhead ms (<= 50)": 1000 * (median(result["pkg_import"]["with"]) - median(result["pkg_import"]["without"])),
        "PRECOMPILE=0 build / plain build (<= 1.1x)": builds["off"] / builds["plain"],
        "precompile build / workload cold run (<= 1.2x)": builds["precompiled"] / result["workload_cold_seconds"],
    }
    return {"table": table, "builds": builds, "targets": targets}


def print_summary(result: dict, summary: dict) -> None:
    print(f"\n{result['package']}: {len(result['runs']['cold']['train_step'])} repeats, each path once in turn, fresh "
          "process, empty cache dir; times are medians, ratios the median of each repeat's own ratio (spread: min to "
          "max)")
    print(f"{'path':<13}{'TTFS':>9}  {'vs cold, pair by pair':<28}{'1st infer':>10}  vs cold, pair by pair")
    for path, row in summary["table"].items():
        ttfs, infer = pairs.summary(row["ttfs_speedup_pairs"]), pairs.summary(row["infer_speedup_pairs"])
        print(f"{path:<13}{row['ttfs']:>8.2f}s  {ttfs['median']:>6.1f}x ({ttfs['min']:.1f}-{ttfs['max']:.1f}x){'':<13}"
              f"{row['first_infer']:>9.2f}s  {infer['median']:>6.1f}x ({infer['min']:.1f}-{infer['max']:.1f}x)")
    b = summary["builds"]
    print(f"builds: precompiled {b['precompiled']:.1f} s, PRECOMPILE=0 {b['off']:.2f} s, plain hatchling {b['plain']:.2f} s; "
          f"workload cold run {result['workload_cold_seconds']:.1f} s; wheels {result['wheel_bytes']['precompiled'] / 1e6:.2f} MB "
          f"vs {result['wheel_bytes']['off'] / 1e3:.1f} kB")
    for name, value in summary["targets"].items():
        if isinstance(value, list):  # ratios pair by pair
            print(f"  {name}: {pairs.describe(value)}")
        else:
            print(f"  {name}: {value:.3g}" if value is not None else f"  {name}: -")
    for path, row in summary["table"].items():
        if "first_step" in row:
            print(f"  {path:<12} first step {1000 * row['first_step']:8.1f} ms, steady {1000 * row['steady_step']:7.2f} ms; "
                  f"compiler modules imported by the trainer's construction (its optimizer): "
                  f"{row['compiler_after_trainer'] or 'none'}, by the first step: {row['compiler_imported_by_the_step'] or 'none'}")
    print("the first call, split (s): Dynamo tracing / backend (cache loads when warm) / other compile / run;"
          " then torch's compile work before the call (a served entry's install at torch.compile)")
    for path in ("cold", "traced", "precompiled", "hot-cache"):
        if path not in summary["table"]:
            continue
        for mode in ("train_step", "infer"):
            split = summary["table"][path].get(f"split_{mode}") or {}
            if split:
                parts = " / ".join(f"{split[part]:.2f}" for part in ("dynamo_tracing", "backend", "other_compile", "run"))
                print(f"  {path:<12} {mode:<10} {parts}; before the call {split.get('compile_before_call', 0.0):.2f}")


def plot(results: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, result in zip(axes[0], results):
        table = result["summary"]["table"]
        ax.bar(list(table), [row["ttfs"] for row in table.values()], color="#4477aa")
        ax.set_title(f"{result['package']}: time to first training step")
        ax.set_ylabel("seconds (median)")
        for i, row in enumerate(table.values()):
            ax.text(i, row["ttfs"], f"{row['ttfs']:.1f}s", ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("projects", nargs="*", default=[str(ROOT / "sample_pkg")],
                        help="PROJECT[:MODULE]: a project dir, and its bench module if not <package>.bench")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paths", default=",".join(PATHS),
                        help="the paths to measure, comma-separated (cold, precompiled and eager always are)")
    parser.add_argument("--builds", type=int, default=5, help="how often the cheap builds are timed (at least 1)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    wanted = {"cold", "precompiled", "eager", *args.paths.split(",")}
    unknown = wanted - set(PATHS)
    if unknown:
        parser.error(f"--paths: unknown path(s) {', '.join(sorted(unknown))}; the paths are {', '.join(PATHS)}")
    paths = tuple(path for path in PATHS if path in wanted)
    print("build venv and hatch-precompile wheel", flush=True)
    hp_dir = out / "hp-wheel"
    shutil.rmtree(hp_dir, ignore_errors=True)
    builder = make_venv(out / "venv-build", TORCH, "build", "hatchling", f"{ROOT}[publish]")
    sh(builder, "-m", "build", "--wheel", "--no-isolation", "-o", hp_dir, ROOT)
    results = []
    for project in args.projects:
        result = bench_project(project, out, args.repeats, hp_dir, builder, paths, max(args.builds, 1))
        result["summary"] = summarize(result)
        results.append(result)
    for result in results:
        print_summary(result, result["summary"])
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "torch": TORCH}
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    if plot(results, out / "ttfs.png"):
        print(f"chart: {out / 'ttfs.png'}")
    print(f"raw numbers: {out / 'results.json'}")


if __name__ == "__main__":
    main()
