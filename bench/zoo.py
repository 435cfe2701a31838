#!/usr/bin/env python3
"""The zoo: library models nobody here wrote, served untraced or not, from process start against eager.

    python3 bench/zoo.py [--python PY] [--cases gpt2_function,...] [--repeats 3] [--out bench-out/zoo] [--together]

Builds bench/projects/zoo (transformers' GPT-2 and BERT, each compiled as a function that takes the
model and as a module, a Llama-architecture causal LM, T5, ViT; torchvision's ResNet-18 and timm's
ConvNeXt where they load) with PY's torch and hatch-precompile (``python -m build --no-isolation``;
PY needs ``build``, ``hatchling``, ``transformers``, and ``torchvision``/``timm`` for those two),
one package per case (``--together``: one package compiling every case, its workload making each
model in turn in one process), unpacks each wheel, then for each case whose library loads runs
fresh processes with an empty ``TORCHINDUCTOR_CACHE_DIR`` each: once compiled cold (``PRECOMPILE=0``), for the outputs; then,
``--repeats`` times in turn (the order reversed every other repeat), the eager program
(``torch.compile`` as the identity) and the served one. Each process makes the case's first
training step (AdamW's included) and first inference, as ``zoo.bench.first_steps`` does.

Prints one table: per case, what ``served()`` says of its functions (served, or traced and why;
where the entry was installed at its module's import or at the function's first call, that too),
the frames Dynamo traced, the time from process start to the end of the first inference and the
first training step alone, each against the eager program's pair by pair (bench/pairs.py), and the
largest difference of its outputs from the cold compile's. Writes ``<out>/zoo.json`` with the raw
numbers and the build's lines on what it served. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pairs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "bench" / "projects" / "zoo"
CASES = ("gpt2_function", "gpt2_module", "bert_function", "bert_module", "llama", "t5", "vit", "resnet18", "convnext")

START = r"""
import json, os, sys, time
case = sys.argv[1]
t0 = time.perf_counter()
import torch
if os.environ.get("ZOO_EAGER") == "1":  # the eager program: torch.compile as the identity
    torch.compile = lambda model=None, **kwargs: model if model is not None else (lambda fn: fn)
import zoo.bench
found = zoo.bench.first_steps(case)
found["from_start"] = time.perf_counter() - t0
dynamo = sys.modules.get("torch._dynamo.utils")
found["traced"] = [m.co_name for m in dynamo.get_compilation_metrics() if m.co_name] if dynamo else []
served = sys.modules.get("hatch_precompile.run.served.served_compile")
found["served"] = served.served() if served else {}
found["at_import"] = served.installed_at_import() if served else []  # installed when its module was imported
found["at_first_call"] = served.installed_at_first_call() if served else []
found["inductor_modules"] = sum(name.startswith("torch._inductor") for name in sys.modules)
print(json.dumps(found))
"""

PROBE = "import sys, zoo.bench; print(','.join(c for c in sys.argv[1].split(',') if zoo.bench.available(c)))"


def run_case(python: str, site: Path, case: str, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="zoo-") as cache:
        full = {**os.environ, "PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": cache, **env}
        proc = subprocess.run([python, "-c", START, case], env=full, cwd=cache, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{case} ({env}) failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def build(python: str, out: Path, cases: list[str]) -> tuple[Path, list[str]]:
    """The zoo built with ``python``'s torch and unpacked; the build's lines on what it served."""
    dist = out / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    env = {**os.environ, "HATCH_PRECOMPILE_NO_DYNAMO_CACHE": "0", "ZOO_CASES": ",".join(cases)}
    proc = subprocess.run([python, "-m", "build", "--wheel", "--no-isolation", "-o", dist, PROJECT], env=env,
                          capture_output=True, text=True)
    (out / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"the zoo's build failed:\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
    site = out / "site"
    shutil.rmtree(site, ignore_errors=True)
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    said = [line for line in (proc.stdout + proc.stderr).splitlines()
            if re.match(r"precompile: (warning: )?(served|not served|\d+ compiled function)", line)]
    return site, said


def largest_difference(found: dict, cold: dict) -> float:
    keys = ("loss", "output", "output_abs", "parameters")
    return max(abs(found[k] - cold[k]) / max(1.0, abs(cold[k])) for k in keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose torch builds and runs the zoo")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench-out/zoo"))
    parser.add_argument("--together", action="store_true",
                        help="one package compiling every case (default: one package per case)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    probe = subprocess.run([args.python, "-c", PROBE, args.cases], env={**os.environ, "PYTHONPATH": str(PROJECT)},
                           capture_output=True, text=True, cwd=tempfile.gettempdir())
    cases = [c for c in probe.stdout.strip().split(",") if c]
    skipped = sorted(set(args.cases.split(",")) - set(cases))
    versions = subprocess.run([args.python, "-c", "import torch, transformers; print(torch.__version__, "
                               "transformers.__version__)"], capture_output=True, text=True).stdout.split()
    print(f"torch {versions[0]}, transformers {versions[1]}; cases {', '.join(cases)}"
          + (f"; not loadable here: {', '.join(skipped)}" if skipped else ""), flush=True)
    if args.together:  # one package compiling every model: the models' registries fill in the build's order
        site, said = build(args.python, args.out, cases)
        sites, built = dict.fromkeys(cases, site), {"together": said}
        print("\n".join(said), flush=True)
    else:  # one package per model, as users' packages are
        sites, built = {}, {}
        for case in cases:
            sites[case], built[case] = build(args.python, args.out / case, [case])
            print(f"{case}: " + "; ".join(line.removeprefix("precompile: ") for line in built[case]), flush=True)
    results: dict[str, dict] = {}
    for case in cases:
        site = sites[case]
        runs: dict[str, list[dict]] = {"eager": [], "served": []}
        cold = run_case(args.python, site, case, {"PRECOMPILE": "0"})
        for repeat in range(args.repeats):
            order = ("eager", "served") if repeat % 2 == 0 else ("served", "eager")
            for path in order:
                runs[path].append(run_case(args.python, site, case, {"ZOO_EAGER": "1", "PRECOMPILE": "0"}
                                           if path == "eager" else {}))
        results[case] = {"cold": cold, **runs}
        print(f"{case}: measured", flush=True)
    rows = ["| case | served? | frames traced | from start / eager program | first step / eager's | "
            "outputs against a cold compile |", "|---|---|---|---|---|---|"]
    for case, found in results.items():
        served, eager = found["served"], found["eager"]
        outcomes = served[0]["served"]
        where = {**dict.fromkeys(served[0].get("at_import", []), " (installed at import)"),
                 **dict.fromkeys(served[0].get("at_first_call", []), " (installed at its first call)")}
        verdict = "; ".join(f"{name.rsplit('.', 1)[-1]}: {outcome}{where.get(name, '')}"
                            for name, outcome in sorted(outcomes.items()))
        start = pairs.ratios([r["from_start"] for r in served], [r["from_start"] for r in eager])
        step = pairs.ratios([r["step_seconds"] for r in served], [r["step_seconds"] for r in eager])
        median = pairs.summary
        rows.append(f"| {case} | {verdict or 'nothing compiled through the package'} | "
                    f"{len(served[0]['traced'])} ({', '.join(served[0]['traced'])}) | "
                    f"{median(start)['median']:.2f}x ({median([r['from_start'] for r in served])['median']:.2f} vs "
                    f"{median([r['from_start'] for r in eager])['median']:.2f} s) | "
                    f"{median(step)['median']:.2f}x ({median([r['step_seconds'] for r in served])['median'] * 1000:.0f} vs "
                    f"{median([r['step_seconds'] for r in eager])['median'] * 1000:.0f} ms) | "
                    f"{max(largest_difference(r, found['cold']) for r in served):.1e} |")
    print("\n".join(rows))
    (args.out / "zoo.json").write_text(json.dumps({
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count()},
        "torch": versions[0], "transformers": versions[1], "repeats": args.repeats, "together": args.together, "build": built,
        "skipped": skipped, "results": results, "table": rows}, indent=1))


if __name__ == "__main__":
    main()
