#!/usr/bin/env python3
"""The compile styles: each way users write torch.compile, served untraced or not, against eager.

    python3 bench/styles.py [--python PY] [--repeats 4] [--out bench-out/styles] [--cases NAME,...]

Builds bench/projects/styles (``python -m build --no-isolation`` with PY's torch and hatch-precompile;
PY needs ``build``, ``hatchling``, ``numpy``, and ``diffusers`` for diffusers' regional compile), one
package whose workload makes each style's first call, unpacks the wheel, then for each style runs
fresh processes with an empty ``TORCHINDUCTOR_CACHE_DIR`` each: once compiled cold (``PRECOMPILE=0``),
for the outputs; then, ``--repeats`` times in turn (the order reversed every other repeat), the eager
program (``torch.compile`` as the identity) and the served one. Each process makes the style's first
call as ``styles_bench.cases`` makes it: at the workload's size, or where the style is about sizes
(``mark_dynamic``, automatic dynamic shapes) at one the workload never used.

Prints one table: per style, what ``served()`` says of its function, the frames Dynamo traced, the
first call and the time from process start to its end, each against the eager program's pair by pair
(bench/pairs.py), and how far the output is from a cold compile's. Writes ``<out>/styles.json`` with
the raw numbers and the build's lines on what it served. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dependency_compiles  # noqa: E402
import pairs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "bench" / "projects" / "styles"
SIZES = {"mark_dynamic inputs": 24, "automatic dynamic: a size the workload never used": 20}  # else the workload's 8

START = r"""
import json, os, sys, time
name, size = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
import torch
if os.environ.get("STYLES_EAGER") == "1":  # the eager program: torch.compile as the identity
    torch.compile = lambda model=None, **kwargs: model if model is not None else (lambda fn: fn)
from styles_bench import cases
seconds, value = cases.CASES[name](size)
found = {"first_call": seconds, "value": value, "from_start": time.perf_counter() - t0}
dynamo = sys.modules.get("torch._dynamo.utils")
found["traced"] = [m.co_name for m in dynamo.get_compilation_metrics() if m.co_name] if dynamo else []
served = sys.modules.get("hatch_precompile.run.served.served_compile")
found["served"] = served.served() if served else {}
print(json.dumps(found))
"""

PROBE = ("import json; from styles_bench import cases; print(json.dumps({'cases': [c for c in cases.CASES if "
         "cases.available(c)], 'functions': cases.FUNCTIONS}))")


def run_case(python: str, site: Path, case: str, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="styles-") as cache:
        full = {**os.environ, "PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": cache, **env}
        proc = subprocess.run([python, "-c", START, case, str(SIZES.get(case, 8))], env=full, cwd=cache,
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{case} ({env}) failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def build(python: str, out: Path) -> tuple[Path, list[str]]:
    """The package built with ``python``'s torch and unpacked (as bench/dependency_compiles.py builds
    its applications); the build's lines on what it served."""
    site, _ = dependency_compiles.build(python, PROJECT, out)
    said = [line for line in (out / "build.log").read_text().splitlines()
            if re.match(r"precompile: (warning: )?(served|not served|\d+ compiled function)", line)]
    return site, said


def verdict(found: dict, function: str) -> str:
    """What served() says of the style's function (the first whose name ends so)."""
    said = [outcome for name, outcome in found["served"].items() if name.split(", ")[0].endswith(function)]
    return said[0] if said else "not compiled through the package"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose torch builds and runs the styles")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--cases", default="", help="the styles to run, by name, comma-separated (default: all)")
    parser.add_argument("--out", type=Path, default=Path("bench-out/styles"))
    args = parser.parse_args()
    if os.sep in args.python:  # the cases run in their own temp dirs
        args.python = str(Path(args.python).absolute())
    args.out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    site, said = build(args.python, args.out)
    print(f"torch {version}\n" + "\n".join(said), flush=True)
    probe = subprocess.run([args.python, "-c", PROBE], env={**os.environ, "PYTHONPATH": str(site), "PRECOMPILE": "0"},
                           capture_output=True, text=True, cwd=tempfile.gettempdir())
    probed = json.loads(probe.stdout.strip().splitlines()[-1])
    cases, functions = probed["cases"], probed["functions"]
    if args.cases:
        cases = [c for c in cases if c in args.cases.split(",")]

    results: dict[str, dict] = {}
    for case in cases:
        runs: dict[str, list[dict]] = {"eager": [], "served": []}
        cold = run_case(args.python, site, case, {"PRECOMPILE": "0"})
        for repeat in range(args.repeats):
            order = ("eager", "served") if repeat % 2 == 0 else ("served", "eager")
            for path in order:
                runs[path].append(run_case(args.python, site, case, {"STYLES_EAGER": "1", "PRECOMPILE": "0"}
                                           if path == "eager" else {}))
        results[case] = {"cold": cold, **runs}
        print(f"{case}: measured", flush=True)
    rows = ["| style | served? | frames traced (cold) | first call / eager's | from start / eager program | "
            "output against a cold compile |", "|---|---|---|---|---|---|"]
    for case, found in results.items():
        served, eager, cold = found["served"], found["eager"], found["cold"]
        first = pairs.ratios([r["first_call"] for r in served], [r["first_call"] for r in eager])
        start = pairs.ratios([r["from_start"] for r in served], [r["from_start"] for r in eager])
        median = pairs.summary
        difference = max(abs(r["value"] - cold["value"]) / max(1.0, abs(cold["value"])) for r in served)
        rows.append(f"| {case} | {verdict(served[0], functions[case])} | {len(served[0]['traced'])} "
                    f"({len(cold['traced'])}) | {median(first)['median']:.1f}x "
                    f"({median([r['first_call'] for r in served])['median'] * 1000:.1f} vs "
                    f"{median([r['first_call'] for r in eager])['median'] * 1000:.1f} ms) | "
                    f"{median(start)['median']:.2f}x ({median([r['from_start'] for r in served])['median']:.2f} vs "
                    f"{median([r['from_start'] for r in eager])['median']:.2f} s) | {difference:.1e} |")
    print("\n".join(rows))
    (args.out / "styles.json").write_text(json.dumps({
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count()},
        "torch": version, "repeats": args.repeats, "build": said, "results": results, "table": rows}, indent=1))


if __name__ == "__main__":
    main()
