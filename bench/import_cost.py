#!/usr/bin/env python3
"""What `import pkg` costs with precompiled artifacts, against the same package's plain wheel.

    python3 bench/import_cost.py [PROJECT] [--repeats 9] [--before REF] [--out bench-out/import-cost]
    python3 bench/import_cost.py --whole [--repeats 8] [--before REF] [--out bench-out/import-cost]

Builds PROJECT (default: bench/projects/tiny_transformer) twice in one venv (``BENCH_TORCH``,
default torch==2.13.0): plain (``PRECOMPILE=0``) and precompiled. Then, in fresh processes with an
empty ``TORCHINDUCTOR_CACHE_DIR`` and an empty ``HOME`` each, alternating: the seconds from before
``import torch`` to the end of ``import pkg`` (whose ``__init__`` calls ``load()``), for the plain
wheel, the precompiled one, and with ``--before REF`` the precompiled one loaded by the
hatch-precompile of git revision REF (a worktree put first on ``sys.path``). Prints the medians,
what the artifacts add taken pair by pair (each repeat runs every wheel once, in turn: the
difference and the ratio to the plain wheel's process of the same repeat, their medians, spread
and the number of pairs, bench/pairs.py; the budget is held to the median difference), and a
profile of one ``load()`` by function (cumulative seconds), so that what can wait for the first
compiled call shows. Standard library only.

``--whole``: the whole process instead, from its start to its exit, measured from outside, for a
package that calls ``torch.compile`` at import and is never called (a CLI's ``--help``, say); the
bench writes that package (``compile_at_import``) itself. In each of a fixed number of pairs,
``python -c "import pkg"`` runs once per wheel, alternating which goes first; each median is split
at the end of ``import pkg`` (read off ``time.time()``): start to the end of the import, then the
end of the import to the exit. The CPU seconds each process used (user and system, from
``getrusage``) are printed beside, and so are the pairs' own differences and ratios (median,
spread, number of pairs) and the fastest process of each wheel: on a shared 2-core machine the
wall clock of one process swings by more than the budget, its CPU time much less. The budget is
the same 50 ms, for the whole process, held to the median of the pairs' differences.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pairs

ROOT = Path(__file__).resolve().parents[1]
TORCH = os.environ.get("BENCH_TORCH", "torch==2.13.0")
BUDGET = 0.050  # what the artifacts may add to `import pkg`

TIMED = r"""
import sys, time
started = time.perf_counter()
import torch
imported = time.perf_counter()
__import__(sys.argv[1])
done = time.perf_counter()
print("@@import", imported - started, done - started)
"""

PROFILED = r"""
import cProfile, io, pstats, sys
import torch, hatch_precompile
profile = cProfile.Profile()
profile.enable()
__import__(sys.argv[1])
profile.disable()
out = io.StringIO()
pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(r"hatch_precompile|json|hashlib|ctypes", 25)
print(out.getvalue())
"""

WHOLE = r"""
import sys, time
__import__(sys.argv[1])
print("@@imported", time.time(), flush=True)
"""

# A package that calls torch.compile at import, as many do; its workload makes the call users make.
COMPILE_AT_IMPORT = {
    "pyproject.toml": "\n".join([
        "[build-system]", 'requires = ["hatchling", "hatch-precompile"]', 'build-backend = "hatchling.build"', "",
        "[project]", 'name = "compile-at-import"', 'version = "0.1.0"', 'requires-python = ">=3.10"',
        'dependencies = ["torch>=2.7", "hatch-precompile"]', "",
        "[tool.hatch.build.targets.wheel]", 'packages = ["compile_at_import"]', "",
        "[tool.hatch.build.hooks.precompile]", 'workload = "compile_at_import.precompile:workload"', ""]),
    "compile_at_import/__init__.py": "\n".join([
        '"""Compiles its model at import; a process that only imports it compiles nothing."""', "",
        "import hatch_precompile", "", "precompile_status = hatch_precompile.load(__name__)", "",
        "import torch  # noqa: E402", "",
        "model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))",
        "forward = torch.compile(model)", ""]),
    "compile_at_import/precompile.py": "\n".join([
        "import torch", "", "from compile_at_import import forward", "", "",
        "def workload():", "    with torch.no_grad():", "        forward(torch.ones(8, 16))", ""]),
}


def sh(*cmd, env=None, cwd=None) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("PRECOMPILE", "HATCH_", "TORCHINDUCTOR"))}
    full.pop("VIRTUAL_ENV", None)
    full.update(env or {})
    proc = subprocess.run([str(c) for c in cmd], env=full, cwd=cwd, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-4000:]}")
    return proc.stdout


def timed(python: Path, package: str, paths: list[Path], work: Path) -> float:
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        (Path(tmp) / "home").mkdir()
        out = sh(python, "-c", TIMED, package, cwd=tmp, env={
            "PYTHONPATH": os.pathsep.join(map(str, paths)), "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/cache",
            "HOME": f"{tmp}/home", "XDG_CACHE_HOME": f"{tmp}/home/.cache"})
    _, _, total = next(line for line in out.splitlines() if line.startswith("@@import")).split()
    return float(total)


def whole(python: Path, package: str, paths: list[Path], work: Path) -> tuple[float, float, float]:
    """(start to the end of ``import package``, the end of the import to the exit, the CPU seconds
    the process used), in seconds."""
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        (Path(tmp) / "home").mkdir()
        env = {"PYTHONPATH": os.pathsep.join(map(str, paths)), "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/cache",
               "HOME": f"{tmp}/home", "XDG_CACHE_HOME": f"{tmp}/home/.cache"}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.time()
        out = sh(python, "-c", WHOLE, package, cwd=tmp, env=env)
        ended = time.time()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    imported = float(next(line for line in out.splitlines() if line.startswith("@@imported")).split()[1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return imported - started, ended - imported, cpu


def whole_table(runs: dict[str, list[tuple[float, float, float]]]) -> list[str]:
    """Medians of the whole process, of its two parts and of its CPU time, each with its difference
    to the plain wheel's; then each wheel's pairwise differences to the plain wheel."""
    medians = {kind: [statistics.median(a + b for a, b, _ in values), statistics.median(a for a, _, _ in values),
                      statistics.median(b for _, b, _ in values), statistics.median(c for _, _, c in values)]
               for kind, values in runs.items()}
    rows = ["| wheel | whole process | start to end of import | import end to exit | CPU time |",
            "|---|---|---|---|---|"]
    for kind, values in medians.items():
        cells = [f"{v * 1e3:.0f} ms ({(v - p) * 1e3:+.0f})" for v, p in zip(values, medians["plain"])]
        rows.append(f"| {kind} | {' | '.join(cells)} |")
    rows.append("")
    for kind, values in runs.items():
        if kind == "plain":
            continue
        for label, part in (("whole process", lambda r: r[0] + r[1]), ("CPU time", lambda r: r[2])):
            mine, plain = [part(r) for r in values], [part(p) for p in runs["plain"]]
            rows.append(f"- {kind}, {label}, pair by pair: {pairs.describe(pairs.differences(mine, plain), ' ms', 1e3, 0)}; "
                        f"ratio {pairs.describe(pairs.ratios(mine, plain), digits=3)}")
    # The machine's noise only ever adds: the fastest process of each wheel is the closest to its own cost.
    fastest = {kind: min(a + b for a, b, _ in values) for kind, values in runs.items()}
    rows.append("- fastest of each: " + ", ".join(
        f"{kind} {value * 1e3:.0f} ms ({(value - fastest['plain']) * 1e3:+.0f})" for kind, value in fastest.items()))
    added = statistics.median(pairs.differences([a + b for a, b, _ in runs["precompiled"]],
                                                [a + b for a, b, _ in runs["plain"]]))
    rows.append(f"- {'ok' if added <= BUDGET else 'MISSED'}: the artifacts add {added * 1e3:.0f} ms to the whole "
                f"process, the median of the pairs' differences (budget {BUDGET * 1e3:.0f} ms)")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("project", nargs="?", default="bench/projects/tiny_transformer")
    parser.add_argument("--whole", action="store_true",
                        help="whole processes to exit, of a package that calls torch.compile at import")
    parser.add_argument("--repeats", type=int, default=None, help="fresh processes per wheel (9; --whole: 8 pairs)")
    parser.add_argument("--before", metavar="REF", help="also load the precompiled wheel with this revision's code")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "import-cost")
    args = parser.parse_args()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    sh(sys.executable, "-m", "venv", out / "venv")
    python = out / "venv" / "bin" / "python"
    sh(python, "-m", "pip", "install", "-q", TORCH, "build", "hatchling", f"{ROOT}[publish]", cwd=out)
    repeats = args.repeats or (8 if args.whole else 9)
    project = (ROOT / args.project).resolve()
    if args.whole:
        project = out / "compile_at_import"
        for name, text in COMPILE_AT_IMPORT.items():
            (project / name).parent.mkdir(parents=True, exist_ok=True)
            (project / name).write_text(text)
    package = next(p.name for p in project.iterdir() if (p / "__init__.py").is_file())
    sites = {}
    for kind, switch in (("plain", "0"), ("precompiled", "1")):
        sh(python, "-m", "build", "--wheel", "--no-isolation", "-o", out / f"dist-{kind}", project,
           env={"PRECOMPILE": switch}, cwd=out)
        with zipfile.ZipFile(next((out / f"dist-{kind}").glob("*.whl"))) as archive:
            archive.extractall(out / f"site-{kind}")
        sites[kind] = [out / f"site-{kind}"]
    if args.before:
        sh("git", "-C", ROOT, "worktree", "add", "--detach", "-f", out / "before", args.before)
        sites["precompiled, before"] = [out / "before", out / "site-precompiled"]
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    torch_version = sh(python, "-c", "import torch; print(torch.__version__)", cwd=out).split()[-1]
    if args.whole:
        pairs: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in sites}
        for repeat in range(repeats):
            for kind in (list(sites) if repeat % 2 == 0 else list(reversed(sites))):
                pairs[kind].append(whole(python, package, sites[kind], out))
        print(f"{package} (torch.compile at import, never called): `python -c 'import {package}'` from start to "
              f"exit, measured from outside, {repeats} pairs of fresh processes run in turn (empty cache dir and "
              f"HOME); torch {torch_version}, {cpu}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}\n")
        print("\n".join(whole_table(pairs)) + "\n")
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            print(sh(python, "-c", PROFILED, package, cwd=tmp, env={
                "PYTHONPATH": str(out / "site-precompiled"), "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/cache"}))
        (out / "results.json").write_text(json.dumps({"package": package, "torch": torch_version, "cpu": cpu,
                                                      "whole": pairs}, indent=1))
        if args.before:
            sh("git", "-C", ROOT, "worktree", "remove", "--force", out / "before")
        return 0
    runs: dict[str, list[float]] = {kind: [] for kind in sites}
    for repeat in range(repeats):
        for kind in (list(sites) if repeat % 2 == 0 else list(reversed(sites))):
            runs[kind].append(timed(python, package, sites[kind], out))
    medians = {kind: statistics.median(values) for kind, values in runs.items()}
    print(f"{package}: from before `import torch` to the end of `import {package}`, {repeats} repeats of fresh "
          f"processes, every wheel once in turn (empty cache dir and HOME); torch {torch_version}, {cpu}, "
          f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}\n")
    print("| wheel | import (median) | over the plain wheel, pair by pair | ratio, pair by pair |\n|---|---|---|---|")
    for kind, value in medians.items():
        print(f"| {kind} | {value * 1e3:.0f} ms | {pairs.describe(pairs.differences(runs[kind], runs['plain']), ' ms', 1e3, 0)} "
              f"| {pairs.describe(pairs.ratios(runs[kind], runs['plain']), digits=3)} |")
    added = statistics.median(pairs.differences(runs["precompiled"], runs["plain"]))
    print(f"\n- {'ok' if added <= BUDGET else 'MISSED'}: the artifacts add {added * 1e3:.0f} ms, the median of the "
          f"pairs' differences (budget {BUDGET * 1e3:.0f} ms)\n")
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        print(sh(python, "-c", PROFILED, package, cwd=tmp, env={
            "PYTHONPATH": str(out / "site-precompiled"), "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/cache"}))
    (out / "results.json").write_text(json.dumps({"package": package, "torch": torch_version, "cpu": cpu,
                                                  "runs": runs, "medians": medians}, indent=1))
    if args.before:
        sh("git", "-C", ROOT, "worktree", "remove", "--force", out / "before")
    return 0


if __name__ == "__main__":
    sys.exit(main())
