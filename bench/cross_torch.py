#!/usr/bin/env python3
"""One wheel across torch versions: a step built on one torch, baked for another, served on both.

    python3 bench/cross_torch.py [PROJECT] [--other torch==2.14.1] [--repeats 7] [--out bench-out/cross-torch]

The fleet recipe of docs/guide/fleets.md, as users run it:

1. one venv with ``BENCH_TORCH`` (default torch==2.13.0) and hatch-precompile installed from this
   checkout as users install it (site-packages, not editable) builds PROJECT (default
   bench/projects/tiny_transformer) with its steps;
2. a second venv with ``--other`` torch; ``hatch-precompile bake WHEEL --python <its python>``, run
   from the first venv, proves the shipped steps there;
3. the baked wheel is served on both torches, in fresh processes (empty cache dir and HOME) in
   pairs, eager (``PRECOMPILE=0``) and the step in turn, a request shape the workload never used
   (bench/serve.py's protocol and child): the route, the first call, and from process start
   against eager, the median of the pairs' ratios (bench/pairs.py).

Prints the table (targets: the ``aotinductor`` route on both, within 1.1x of eager from process
start, the first call in milliseconds) and writes ``<out>/results.json``. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import pairs
import serve

ROOT = serve.ROOT


def other_venv(path: Path, requirement: str) -> Path:
    serve.sh(sys.executable, "-m", "venv", "--clear", path)
    python = path / "bin" / "python"
    serve.sh(python, "-m", "pip", "install", "-q", requirement, str(ROOT))
    return python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("project", nargs="?", default="bench/projects/tiny_transformer")
    parser.add_argument("--other", default="torch==2.14.1", help="the torch to bake for (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "cross-torch")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pythons = {"built": serve.venv(args.out / "venv-built", []), "baked": other_venv(args.out / "venv-baked", args.other)}
    project = (ROOT / args.project).resolve()
    package = project.name
    work = args.out / package
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    wheel, build_seconds = serve.build(pythons["built"], project, work / "dist", {})
    baked = work / "baked"
    bake = serve.sh(pythons["built"], "-m", "hatch_precompile", "bake", "-o", baked, "--python", pythons["baked"], wheel,
                    cwd=work)
    said = [line.strip(" |") for line in bake.stdout.splitlines() if "step '" in line]
    site = serve.unpack(next(baked.glob("*.whl")), work / "site")
    env = {"BENCH_WEIGHTS": str(work / "weights.pt")}
    serve.sh(pythons["built"], "-c", f"import {package}.bench as b; b.checkpoint({str(work / 'weights.pt')!r})",
             env={"PYTHONPATH": str(site)}, cwd=work)
    results: dict = {"cpu": _cpu(), "cores": os.cpu_count(), "python": platform.python_version(),
                     "date": time.strftime("%Y-%m-%d"), "project": args.project, "bake": said, "torches": {}}
    for side, python in pythons.items():
        version = serve.sh(python, "-c", "import torch; print(torch.__version__)").stdout.strip().splitlines()[-1]
        side_work = work / f"runs-{side}"
        side_work.mkdir()
        serve.serve(python, site, package, "eager", side_work, 0, env)  # this torch's reference answer
        runs: dict[str, list[dict]] = {"eager": [], "step": []}
        for repeat in range(args.repeats):
            for mode in (("eager", "step") if repeat % 2 == 0 else ("step", "eager")):
                runs[mode].append(serve.serve(python, site, package, mode, side_work, 0, env))
        results["torches"][version] = {"side": side, "runs": runs}
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"{results['cpu']}, {results['cores']} cores, Python {results['python']}, {results['date']}; "
          f"{package} built on the first torch ({build_seconds:.0f} s), baked for the second; fresh processes "
          f"in pairs, eager and the step in turn\n")
    for line in said:
        print(f"    {line}")
    print("\n| torch | route | first call | from start against eager (pairs) | max diff from eager | compiler modules |")
    print("|---|---|---|---|---|---|")
    for version, found in results["torches"].items():
        step, eager = found["runs"]["step"], found["runs"]["eager"]
        routes = ", ".join(sorted({r["route"] or "none" for r in step}))
        ratio = pairs.ratios([r["from_start"] for r in step], [r["from_start"] for r in eager])
        modules = sorted({m for r in step for m in r["compiler"]}) or ["none"]
        print(f"| {version} ({found['side']}) | {routes} | {serve.median(step, 'first_call') * 1e3:.0f} ms | "
              f"{pairs.describe(ratio)} | {max(r.get('error') or 0.0 for r in step):.1e} | {', '.join(modules)} |")
        reasons = sorted({r["reason"] for r in step if r["reason"]})
        for reason in reasons:
            print(f"|  | fallback: {reason} | | | | |")
    return 0


def _cpu() -> str:
    return next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), platform.processor())


if __name__ == "__main__":
    sys.exit(main())
