#!/usr/bin/env python3
"""What `import pkg` costs with precompiled artifacts, against the same package's plain wheel.

    python3 bench/import_cost.py [PROJECT] [--repeats 9] [--before REF] [--out bench-out/import-cost]

Builds PROJECT (default: bench/projects/tiny_transformer) twice in one venv (``BENCH_TORCH``,
default torch==2.13.0): plain (``PRECOMPILE=0``) and precompiled. Then, in fresh processes with an
empty ``TORCHINDUCTOR_CACHE_DIR`` and an empty ``HOME`` each, alternating: the seconds from before
``import torch`` to the end of ``import pkg`` (whose ``__init__`` calls ``load()``), for the plain
wheel, the precompiled one, and with ``--before REF`` the precompiled one loaded by the
hatch-precompile of git revision REF (a worktree put first on ``sys.path``). Prints the medians,
what the artifacts add, and a profile of one ``load()`` by function (cumulative seconds), so that
what can wait for the first compiled call shows. Standard library only.
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
import zipfile
from pathlib import Path

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("project", nargs="?", default="bench/projects/tiny_transformer")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--before", metavar="REF", help="also load the precompiled wheel with this revision's code")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "import-cost")
    args = parser.parse_args()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    sh(sys.executable, "-m", "venv", out / "venv")
    python = out / "venv" / "bin" / "python"
    sh(python, "-m", "pip", "install", "-q", TORCH, "build", "hatchling", f"{ROOT}[publish]", cwd=out)
    project = (ROOT / args.project).resolve()
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
    runs: dict[str, list[float]] = {kind: [] for kind in sites}
    for repeat in range(args.repeats):
        for kind in (list(sites) if repeat % 2 == 0 else list(reversed(sites))):
            runs[kind].append(timed(python, package, sites[kind], out))
    medians = {kind: statistics.median(values) for kind, values in runs.items()}
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    torch_version = sh(python, "-c", "import torch; print(torch.__version__)", cwd=out).split()[-1]
    print(f"{package}: from before `import torch` to the end of `import {package}`, medians of {args.repeats} fresh "
          f"processes (empty cache dir and HOME); torch {torch_version}, {cpu}, {os.cpu_count()} cores\n")
    print("| wheel | import | over the plain wheel |\n|---|---|---|")
    for kind, value in medians.items():
        print(f"| {kind} | {value * 1e3:.0f} ms | {(value - medians['plain']) * 1e3:+.0f} ms |")
    added = medians["precompiled"] - medians["plain"]
    print(f"\n- {'ok' if added <= BUDGET else 'MISSED'}: the artifacts add {added * 1e3:.0f} ms "
          f"(budget {BUDGET * 1e3:.0f} ms)\n")
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
