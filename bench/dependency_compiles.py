#!/usr/bin/env python3
"""The compiles a package's dependencies make on its behalf, served untraced or not, against eager.

    python3 bench/dependency_compiles.py [--python PY] [--cases llm,bitnet] [--repeats 4] [--out bench-out/deps]

Two applications whose only compile is a library's (bench/projects):

- ``llm``: llm_app, a tiny Llama from a config whose ``generate()`` with a static cache makes
  transformers compile the model's ``__call__`` inside (``PreTrainedModel.get_compiled_call``);
- ``bitnet``: bitnet_app, which unpacks a layer's 2-bit weights with transformers' own
  ``@torch.compile`` function (``transformers.integrations.bitnet.unpack_weights``).

Each is built with PY's torch and hatch-precompile (``python -m build --no-isolation``: PY needs
``build``, ``hatchling`` and ``transformers``) and unpacked. Then fresh processes, each with an
empty ``TORCHINDUCTOR_CACHE_DIR`` and ``HOME``: once compiled cold (``PRECOMPILE=0``), and
``--repeats`` times in turn (the order reversed every other repeat) the eager program
(``torch.compile`` the identity) and the precompiled one. Each process times its first call from
process start and alone. Prints one table: what ``served()`` says, the frames Dynamo traced, the
times of the three against each other pair by pair (bench/pairs.py), and whether the outputs are
the cold compile's. Writes ``<out>/dependency_compiles.json`` with the raw numbers. Standard
library only.
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
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pairs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = {"llm": ROOT / "bench" / "projects" / "llm_app", "bitnet": ROOT / "bench" / "projects" / "bitnet_app"}

FIRST_CALL = r"""
import json, os, sys, time
case = sys.argv[1]
t0 = time.perf_counter()
import torch
if os.environ.get("DEPS_EAGER") == "1":  # the eager program: torch.compile as the identity
    torch.compile = lambda model=None, **kwargs: model if model is not None else (lambda fn: fn)
if case == "llm":
    from llm_app import model as M
    model, ids = M.make_model(), M.prompt()
    began = time.perf_counter()
    out = M.generate(model, ids).double()
else:
    from bitnet_app import weights
    packed = weights.packed()
    began = time.perf_counter()
    out = weights.dense(packed).double()
ended = time.perf_counter()
dynamo = sys.modules.get("torch._dynamo.utils")
served = sys.modules.get("hatch_precompile.run.served.served_compile")
print(json.dumps({"from_start": ended - t0, "first_call": ended - began, "output": out.sum().item(),
                  "output_abs": out.abs().sum().item(), "values": out.flatten()[:64].tolist(),
                  "traced": [m.co_name for m in dynamo.get_compilation_metrics() if m.co_name] if dynamo else [],
                  "served": served.served() if served else {}}))
"""


def build(python: str, project: Path, out: Path) -> tuple[Path, list[str]]:
    """``project`` built with ``python``'s torch and unpacked; the build's lines on what it served."""
    dist = out / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)  # its log is written whether or not the build made a wheel
    proc = subprocess.run([python, "-m", "build", "--wheel", "--no-isolation", "-o", dist, project],
                          env={**os.environ, "HATCH_PRECOMPILE_NO_DYNAMO_CACHE": "0"}, capture_output=True, text=True)
    (out / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{project.name}'s build failed:\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
    site = out / "site"
    shutil.rmtree(site, ignore_errors=True)
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site, [line for line in (proc.stdout + proc.stderr).splitlines() if "served" in line and line.startswith("precompile:")]


def first_call(python: str, site: Path, case: str, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="deps-") as scratch:
        full = {**os.environ, "PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": f"{scratch}/cache",
                "HOME": f"{scratch}/home", **env}
        proc = subprocess.run([python, "-c", FIRST_CALL, case], env=full, cwd=scratch, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{case} ({env}) failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose torch builds and runs them")
    parser.add_argument("--cases", default=",".join(PROJECTS))
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("bench-out/deps"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    versions = subprocess.run([args.python, "-c", "import torch, transformers; print(torch.__version__, "
                               "transformers.__version__)"], capture_output=True, text=True).stdout.split()
    print(f"torch {versions[0]}, transformers {versions[1]}", flush=True)
    results: dict[str, dict] = {}
    for case in args.cases.split(","):
        site, said = build(args.python, PROJECTS[case], args.out / case)
        print(f"{case}: " + "; ".join(line.removeprefix("precompile: ") for line in said), flush=True)
        runs: dict[str, list[dict]] = {"eager": [], "served": []}
        cold = first_call(args.python, site, case, {"PRECOMPILE": "0"})
        for repeat in range(args.repeats):
            for path in ("eager", "served") if repeat % 2 == 0 else ("served", "eager"):
                runs[path].append(first_call(args.python, site, case, {"DEPS_EAGER": "1", "PRECOMPILE": "0"}
                                             if path == "eager" else {}))
        results[case] = {"cold": cold, **runs, "build": said}
    rows = ["| case | served? | frames traced | eager program: from start / first call | cold compile | "
            "precompiled: from start (/ eager) | first call (/ eager's) | outputs against a cold compile |",
            "|---|---|---|---|---|---|---|---|"]
    median = pairs.summary
    for case, found in results.items():
        served, eager, cold = found["served"], found["eager"], found["cold"]
        verdict = "; ".join(f"{outcome}" for outcome in served[0]["served"].values()) or "nothing served"
        start = pairs.ratios([r["from_start"] for r in served], [r["from_start"] for r in eager])
        call = pairs.ratios([r["first_call"] for r in served], [r["first_call"] for r in eager])
        same = all(r["values"] == cold["values"] and abs(r["output"] - cold["output"]) <= 1e-6 * max(1, abs(cold["output"]))
                   for r in served)
        rows.append(
            f"| {case} | {verdict} | {len(served[0]['traced'])} ({', '.join(served[0]['traced'])}) | "
            f"{median([r['from_start'] for r in eager])['median']:.2f} s / "
            f"{median([r['first_call'] for r in eager])['median'] * 1000:.0f} ms | "
            f"{cold['from_start']:.2f} s / {cold['first_call']:.2f} s | "
            f"{median([r['from_start'] for r in served])['median']:.2f} s ({pairs.describe(start)}) | "
            f"{median([r['first_call'] for r in served])['median'] * 1000:.0f} ms ({pairs.describe(call)}) | "
            f"{'equal' if same else 'DIFFER'} |")
    print("\n".join(rows))
    (args.out / "dependency_compiles.json").write_text(json.dumps({
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count()},
        "torch": versions[0], "transformers": versions[1], "repeats": args.repeats, "results": results, "table": rows},
        indent=1))


if __name__ == "__main__":
    main()
