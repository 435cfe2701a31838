#!/usr/bin/env python3
"""Where a served start's time goes beyond the eager program's: the whole start, pair by pair, and
what torch imports on its cache-hit path, module group by module group.

    python3 bench/served_start.py [PROJECT] [--repeats 5] [--out bench-out/served-start]

Builds PROJECT (default: bench/projects/compiled_transformer, whose loss is compiled at import) with
this interpreter's torch and hatch-precompile (``python -m build --no-isolation``), unpacks the
wheel, then runs, alternating, in fresh processes with an empty ``TORCHINDUCTOR_CACHE_DIR`` each:

- the eager program (``torch.compile`` as the identity, loading off) and the served one: seconds
  from before ``import torch`` to the end of the first training step (the project's
  ``<package>.bench.train_step()``), split at ``import pkg``; the served/eager ratio and the
  difference, pair by pair (bench/pairs.py);
- the marginal cost of the module groups torch's own path from ``torch.compile`` to a loaded
  graph's first call imports, each imported after the last, on top of what the eager program
  imports by its first optimizer step (``torch``, ``torch._dynamo``, ``torch.optim``), and whether
  the served start imported each: ``torch.compile``'s backend wrapper (the minifier, which imports
  AOTAutograd, whose partitioner imports networkx); loading a graph (AOTAutograd's result,
  Inductor's code cache); the decomposition tables the entry names; the kernels' compile commands
  (``cpp_extension``, setuptools); Inductor's debug module, which the loaded code reads; and the
  header and cache hit as torch writes them (``select_algorithm``, ``memory_planning``, ``graph``:
  the lowerings and the kernel registry).

Writes ``<out>/served-start.json``. Standard library only (and the project's build requirements).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pairs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

START = r"""
import importlib, json, os, sys, time
package = sys.argv[1]
t0 = time.perf_counter()
import torch
if os.environ.get("BENCH_EAGER") == "1":
    torch.compile = lambda model=None, **kwargs: model if model is not None else (lambda fn: fn)
t1 = time.perf_counter()
importlib.import_module(package)
t2 = time.perf_counter()
out = importlib.import_module(package + ".bench").train_step()
float(out)
t3 = time.perf_counter()
print(json.dumps({"torch": t1 - t0, "pkg": t2 - t1, "first_step": t3 - t2, "total": t3 - t0, "output": float(out),
                  "inductor_modules": sum(m.startswith("torch._inductor") for m in sys.modules),
                  "modules": sorted(sys.modules)}))
"""

GROUPS = [  # what torch's own path from torch.compile to a loaded graph's first call imports
    ("torch.compile's backend wrapper, the minifier (AOTAutograd, its partitioner, networkx)",
     ["torch._dynamo.repro.after_dynamo", "torch._functorch.aot_autograd"]),
    ("loading a graph (AOTAutograd's result, Inductor's code cache)",
     ["torch._functorch._aot_autograd.aot_autograd_result", "torch._inductor.codecache", "torch._inductor.output_code",
      "torch._inductor.async_compile"]),
    ("the entry's compile arguments (the decomposition tables)", ["torch._inductor.decomposition"]),
    ("the loaded code's kernel commands (cpp_extension, setuptools)", ["torch.utils.cpp_extension"]),
    ("the loaded code's reads (Inductor's debug module: the scheduler, the IR)", ["torch._inductor.debug"]),
    ("the loaded code's header and cache hit as torch writes them (select_algorithm, memory_planning, graph: "
     "the lowerings, the kernel registry)",
     ["torch._inductor.codegen.memory_planning", "torch._inductor.select_algorithm", "torch._inductor.graph"]),
]

MARGINAL = r"""
import importlib, json, sys, time
groups = json.loads(sys.argv[1])
t = time.perf_counter()
import torch, torch._dynamo, torch.optim  # what the eager program has imported by its first optimizer step
out = {"the eager program's (torch, torch._dynamo, torch.optim)": [time.perf_counter() - t, len(sys.modules)]}
for name, modules in groups:
    n, t = len(sys.modules), time.perf_counter()
    for module in modules:
        importlib.import_module(module)
    out[name] = [time.perf_counter() - t, len(sys.modules) - n]
print(json.dumps(out))
"""


def run(code: list[str], env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", *code], env={**os.environ, **env}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"a measured process failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("project", nargs="?", type=Path, default=ROOT / "bench/projects/compiled_transformer")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out/served-start")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dist, site = args.out / "dist", args.out / "site"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(dist), str(args.project)],
                   check=True, capture_output=True)
    (wheel,) = dist.glob("*.whl")
    zipfile.ZipFile(wheel).extractall(site)
    package = next(p.name for p in site.iterdir() if (p / "bench.py").is_file())
    runs: dict[str, list] = {"eager": [], "served": [], "marginal": []}
    for _ in range(args.repeats):
        for path, extra in (("eager", {"BENCH_EAGER": "1", "PRECOMPILE": "0"}), ("served", {})):
            env = {"PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="served-start-"), **extra}
            runs[path].append(run([START, package], env))
        runs["marginal"].append(run([MARGINAL, json.dumps(GROUPS)], {"TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp()}))
    import torch  # only its version, for the record

    results = {"torch": torch.__version__, "python": platform.python_version(), "cpus": os.cpu_count(),
               "cpu": platform.processor() or platform.machine(), "package": package, "runs": runs}
    (args.out / "served-start.json").write_text(json.dumps(results, indent=1))
    print(f"{package}, torch {torch.__version__}, {args.repeats} pairs (medians):")
    for path in ("eager", "served"):
        r = runs[path]
        print(f"  {path:7s} import torch {statistics.median(x['torch'] for x in r):.2f} s, import pkg "
              f"{statistics.median(x['pkg'] for x in r):.2f} s, first step {statistics.median(x['first_step'] for x in r):.3f} s, "
              f"from start {statistics.median(x['total'] for x in r):.2f} s ({r[0]['inductor_modules']} Inductor modules)")
    total = [x["total"] for x in runs["served"]], [x["total"] for x in runs["eager"]]
    print("  served / eager from start: " + pairs.describe(pairs.ratios(*total)))
    print("  served - eager from start: " + pairs.describe(pairs.differences(*total), unit=" s"))
    print("  what torch's own path imports beyond the eager program's, each group on top of the last, and "
          "whether a served start imports it:")
    served_imports = set(runs["served"][0]["modules"]) - set(runs["eager"][0]["modules"])
    imported = {name: any(m in served_imports for m in modules) for name, modules in GROUPS}
    for name in runs["marginal"][0]:
        said = "" if name not in imported else ("; served: imported" if imported[name] else "; served: not imported")
        print(f"    {name}: {statistics.median(m[name][0] for m in runs['marginal']):.3f} s, "
              f"{runs['marginal'][0][name][1]} modules{said}")
    print(f"  a served start imports {len(served_imports)} modules the eager program does not")
    print("  outputs equal:", len({round(x["output"], 6) for x in runs["eager"] + runs["served"]}) == 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
