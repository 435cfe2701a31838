#!/usr/bin/env python3
"""The CUDA path, measured: eager, cold, Mega-Cache by hand and the precompiled wheel, on one GPU.

    python3 bench/gpu.py --quick --find-links WHEELS [--out DIR]      # the prepared GPU check
    python3 bench/gpu.py --find-links WHEELS [--projects sample_pkg gpu_block gpu_block@max-autotune]
                         [--repeats 2] [--paths eager cold megacache precompiled] [--probe-loader]
                         [--variant NAME:VAR=VALUE,...] [--tests-timeout SECONDS] [--out DIR]

Runs where the GPU is, with the Python that has torch, and needs no network: WHEELS holds
hatchling, hatch-precompile and their dependencies for pip's isolated build env. For each project
(``NAME@MODE`` sets ``GPU_BLOCK_COMPILE_MODE=MODE`` for build and runs alike):

1. ``pip wheel`` (isolated, the default) builds it precompiled, steps on, against the running
   torch (the target environment, builder/target_environment.py), and the wheel is installed here;
2. fresh processes, each with an empty ``TORCHINDUCTOR_CACHE_DIR`` and ``HOME``, make the first
   training step and then the first inference call: eager (``torch.compile`` as the identity),
   cold (``PRECOMPILE=0``), Mega-Cache by hand (``PRECOMPILE=0`` + ``load_cache_artifacts`` of the
   Mega-Cache the cold row saved), precompiled, and each ``--variant`` (a precompiled row of sample_pkg
   with more variables; ``BENCH_PROFILE=FILE`` profiles its first step);
3. every process runs with ``bench/gpu_count/sitecustomize.py``, which counts real Triton
   compiles and run-time autotuning benchmarks and times each phase of the first step (imports,
   CUDA, Dynamo, cache and kernel loads, Triton's C modules, the compile pool, Triton's key); every
   compiler process is counted by its exec, through shims on ``PATH`` (and ``CC``, ``CXX``,
   ``TRITON_PTXAS_PATH``).

``--quick`` is the prepared check (docs/guide/gpu.md): torch's own AOTInductor loader probed on a
plain model first (built in one process, opened in another), sample_pkg's four rows and its
exported steps against eager (other weights, a batch size the workload never used), gpu_block
cold against warm, then tests/integration/test_gpu.py; one repeat. Prints the tables; writes
``gpu-results.json``, ``gpu.log`` and the build logs to ``--out``. Before the projects' rows, a
probe: the GPU as NVML names it (the key) and as CUDA does, and whether ``import sample_pkg``
initialises CUDA or breaks a fork-started child's use of it. Without CUDA it is a dry run of the
same plumbing on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = {"sample_pkg": ROOT / "sample_pkg", "gpu_block": ROOT / "bench/projects/gpu_block"}
PATHS = ("eager", "cold", "megacache", "precompiled")
COMPILERS = ("gcc", "cc", "g++", "c++", "clang", "clang++", "nvcc")  # counted by their exec (PATH shims)

HARNESS = r"""
import importlib, json, os, sys, time
package, megacache = sys.argv[1:3]
t0 = time.perf_counter()
import torch
if os.environ.get("BENCH_EAGER") == "1":  # the same program with torch.compile as the identity
    def _identity(model=None, **kwargs):
        return model if model is not None else (lambda fn: fn)
    torch.compile = _identity
pkg = importlib.import_module(package)
import_seconds = time.perf_counter() - t0
cuda_initialized_by_import = torch.cuda.is_initialized()
if megacache != "-":
    torch.compiler.load_cache_artifacts(open(megacache, "rb").read())
trainer = pkg.Trainer(pkg.make_model())
inputs, targets = pkg.make_batch()
if torch.cuda.is_available():  # else a dry run on the CPU
    torch.cuda.synchronize()
profile = os.environ.get("BENCH_PROFILE")  # a variant's: where the first step's profile goes
if profile:
    import cProfile, io, pstats
    profiler = cProfile.Profile(); profiler.enable()
t = time.perf_counter(); loss = trainer.step(inputs, targets).item(); step = time.perf_counter() - t
if profile:
    profiler.disable(); text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(60)
    open(profile, "w").write(text.getvalue())
t = time.perf_counter(); out = trainer.predict(inputs).double().sum().item(); predict = time.perf_counter() - t
t = time.perf_counter(); trainer.step(inputs, targets).item(); second = time.perf_counter() - t
from torch._dynamo.utils import counters
if os.environ.get("BENCH_SAVE_MEGACACHE"):  # the cold row: what Mega-Cache by hand loads in its own row
    open(os.environ["BENCH_SAVE_MEGACACHE"], "wb").write(torch.compiler.save_cache_artifacts()[0])
try:
    import hatch_precompile
    served = hatch_precompile.served()  # what became of each compiled function's shipped Dynamo cache entry
except Exception:
    served = None
import importlib.util
def _no_pyc(module):  # its source was compiled in this process: no bytecode file Python could use
    path = getattr(module, "__file__", None) or ""
    return path.endswith(".py") and not os.path.exists(importlib.util.cache_from_source(path))
print("@@" + json.dumps({
    "torch_modules": sum(1 for n in list(sys.modules) if n.startswith("torch")),
    "modules_without_pyc": sum(1 for m in list(sys.modules.values()) if _no_pyc(m)),
    "import_seconds": import_seconds, "first_step_seconds": step, "first_predict_seconds": predict,
    "second_step_seconds": second, "loss": loss, "output_sum": out,
    "cuda_initialized_by_import": cuda_initialized_by_import,
    "loaded": bool(getattr(pkg, "precompile_status", None)),
    "reason": getattr(getattr(pkg, "precompile_status", None), "reason", None),
    "aot_autograd": dict(counters["aot_autograd"]), "served": served,
    "inductor": {k: v for k, v in counters["inductor"].items()
                 if "cache" in k or "bundler" in k or "autotune" in k or "select_algorithm" in k},
    "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
}))
"""

PROBE = r"""
import json, os, sys, time
import torch
from hatch_precompile.run.sets import environment_key, gpu
t = time.perf_counter(); key = environment_key.current(torch); key_seconds = time.perf_counter() - t
initialized_by_key = torch.cuda.is_initialized()
props = torch.cuda.get_device_properties(0)
print("@@" + json.dumps({
    "key": key, "key_seconds": key_seconds, "cuda_initialized_by_key": initialized_by_key,
    "torch_name": props.name, "torch_capability": f"{props.major}.{props.minor}",
    "nvml_devices": [d.__dict__ for d in gpu.devices()], "torch": torch.__version__,
    "torch_cuda": torch.version.cuda,
}))
"""

# A fork-started child's CUDA use after `import PKG` in the parent (as DataLoader workers do).
FORK = r"""
import json, os, sys
import torch
if sys.argv[2] == "touch-cuda-first":
    torch.cuda.get_device_name(0)  # what envkey did at import before it asked NVML
__import__(sys.argv[1])
initialized = torch.cuda.is_initialized()
pid = os.fork()
if pid == 0:
    try:
        os._exit(0 if torch.ones(4, device="cuda").sum().item() == 4 else 1)
    except BaseException as exc:
        sys.stderr.write(f"child: {exc!r}\n"); os._exit(2)
_, status = os.waitpid(pid, 0)
print("@@" + json.dumps({"cuda_initialized_in_parent": initialized, "child_exit": os.waitstatus_to_exitcode(status)}))
"""


# The sample's exported steps as users call them: weights other than the build's (seed 3) and a
# batch size the workload never used (7), against eager; the route each took, and why.
STEPS = r"""
import copy, json, torch, sample_pkg
from sample_pkg.model import classify, classify_step, loss_step, make_batch, make_model, training_loss
model = make_model(seed=3)
images, labels = make_batch(batch_size=7, seed=5)
out = {}
with torch.no_grad():
    served = copy.deepcopy(model).eval()
    got = classify_step(served, images)
    out["classify"] = [classify_step.route, classify_step.reason,
                       (got.double() - classify(served, images).double()).abs().max().item()]
eager = copy.deepcopy(model)
loss = loss_step(model, images, labels)
want = training_loss(eager, images, labels)
want.backward()
grads = max((p.grad.double() - q.grad.double()).abs().max().item() for p, q in zip(model.parameters(), eager.parameters()))
out["loss"] = [loss_step.route, loss_step.reason, abs(loss.item() - want.item()), grads]
print("@@" + json.dumps(out))
"""


def check_steps(scratch: Path) -> dict:
    """The installed sample's loss and classify steps against eager, in a fresh process."""
    return run_json([sys.executable, "-c", STEPS], fresh_env(scratch, {}))


def run_tests(out: Path, timeout: float) -> dict:
    """tests/integration/test_gpu.py (marked cuda) with this Python; its log under ``out``."""
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
                               str(ROOT / "tests/integration/test_gpu.py")], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"{exc.stdout or ''}\n(stopped after {timeout:g} s)", None
        output = output if isinstance(output, str) else output.decode()
    (out / "gpu-tests.log").write_text(output)
    summary = next((line for line in reversed(output.splitlines()) if " passed" in line or " failed" in line
                    or " skipped" in line or "stopped after" in line), "")
    return {"exit": code, "summary": summary.strip("= "), "seconds": round(time.perf_counter() - started, 1)}


def run_json(args: list[str], env: dict[str, str], timeout: float = 900) -> dict:
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("@@"):
            return json.loads(line[2:])
    raise RuntimeError(f"{args[:3]} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")


def fresh_env(scratch: Path, extra: dict[str, str]) -> dict[str, str]:
    run_dir = Path(tempfile.mkdtemp(dir=scratch))
    (run_dir / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "PRECOMPILE")}
    env.update({
        "TORCHINDUCTOR_CACHE_DIR": str(run_dir / "cache"), "HOME": str(run_dir / "home"),
        "GPU_COUNT_FILE": str(run_dir / "count"), "PYTHONPATH": str(ROOT / "bench/gpu_count"), **extra,
    })
    return env


def counted(env: dict[str, str]) -> dict[str, int]:
    path = Path(env["GPU_COUNT_FILE"])
    lines = [line.split() for line in path.read_text().splitlines()] if path.is_file() else []
    events = [f"{w[0]}_{w[1]}" if w[0] == "exec" else w[0] for w in lines if w and w[0] != "time"]
    return {e: events.count(e) for e in sorted(set(events))}


def phases(env: dict[str, str]) -> dict[str, float]:
    """Seconds per phase (bench/gpu_count/sitecustomize.py), summed over the run's processes."""
    path = Path(env["GPU_COUNT_FILE"])
    spent: dict[str, float] = {}
    for words in (line.split() for line in path.read_text().splitlines()) if path.is_file() else ():
        if len(words) == 5 and words[0] == "time":
            spent[words[1]] = round(spent.get(words[1], 0.0) + float(words[3]), 3)
    return spent


def compiler_shims(scratch: Path) -> dict[str, str]:
    """``PATH`` with a shim before each C compiler, and ``TRITON_PTXAS_PATH`` at a shim for Triton's
    ptxas: each records its exec in ``GPU_COUNT_FILE``, then runs the real tool."""
    shims = scratch / "shims"
    shims.mkdir(exist_ok=True)
    found = {name: shutil.which(name) for name in COMPILERS}
    ptxas = os.environ.get("TRITON_PTXAS_PATH") or _bundled_ptxas()
    if ptxas:
        found["ptxas"] = ptxas
    for name, real in found.items():
        if real:
            shim = shims / name
            shim.write_text(f'#!/bin/sh\necho "exec {name} $$" >> "$GPU_COUNT_FILE"\nexec {real} "$@"\n')
            shim.chmod(0o755)
    env = {"PATH": f"{shims}:{os.environ.get('PATH', '')}"}
    if ptxas:
        env["TRITON_PTXAS_PATH"] = str(shims / "ptxas")
    for variable in ("CC", "CXX"):  # a compiler named by path (Triton and Inductor read these first)
        real = os.environ.get(variable)
        if real and shutil.which(real):
            shim = shims / f"{variable.lower()}-{Path(real).name}"
            shim.write_text(f'#!/bin/sh\necho "exec {Path(real).name} $$" >> "$GPU_COUNT_FILE"\nexec {shutil.which(real)} "$@"\n')
            shim.chmod(0o755)
            env[variable] = str(shim)
    return env


def _bundled_ptxas() -> str | None:
    code = ("import os, triton; p = os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/ptxas'); "
            "print(p if os.path.exists(p) else '')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return proc.stdout.strip() or None


def measure(package: str, path: str, megacache: Path | None, scratch: Path, extra: dict[str, str]) -> dict:
    """One fresh process of ``path``; the cold one saves its Mega-Cache to ``megacache`` (the wheel
    ships none: nothing loads it), which the Mega-Cache row then loads, as the recipe goes."""
    env = fresh_env(scratch, {**extra, **({"PRECOMPILE": "0"} if path != "precompiled" else {}),
                              **({"BENCH_EAGER": "1"} if path == "eager" else {}),
                              **({"BENCH_SAVE_MEGACACHE": str(megacache)} if path == "cold" and megacache else {})})
    result = run_json([sys.executable, "-c", HARNESS, package, str(megacache) if path == "megacache" else "-"], env)
    result["counted"] = counted(env)
    result["phases"] = phases(env)
    cache = Path(env["TORCHINDUCTOR_CACHE_DIR"])
    result["cubins_in_cache"] = sum(1 for _ in cache.rglob("*.cubin"))
    return result


def pip(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], env=env, capture_output=True, text=True)


def build_and_install(name: str, mode: str | None, find_links: str, out: Path, scratch: Path) -> dict:
    wheel_dir = scratch / f"wheels-{name}-{mode or 'default'}"
    env = dict(os.environ)
    if mode:
        env["GPU_BLOCK_COMPILE_MODE"] = mode
    started = time.perf_counter()
    proc = pip("wheel", "-v", "--no-deps", "--no-index", "--find-links", find_links, "-w", str(wheel_dir),
               str(PROJECTS[name]), env=env)
    seconds = time.perf_counter() - started
    log = proc.stdout + proc.stderr
    (out / f"build-{name}-{mode or 'default'}.log").write_text(log)
    if proc.returncode != 0:
        raise RuntimeError(f"building {name} failed:\n{log[-6000:]}")
    (wheel,) = wheel_dir.glob("*.whl")
    proc = pip("install", "--no-deps", "--force-reinstall", "--no-index", str(wheel))
    if proc.returncode != 0:
        raise RuntimeError(f"installing {wheel.name} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    lines = [line.strip() for line in log.splitlines() if "precompile:" in line]
    return {"build_seconds": round(seconds, 1), "wheel": wheel.name, "wheel_bytes": wheel.stat().st_size,
            "build_lines": lines}


def installed_set(package: str) -> tuple[Path, dict] | None:
    """(the installed ``_precompiled`` dir, the manifest of its GPU set)."""
    code = "import importlib.util, sys; print(importlib.util.find_spec(sys.argv[1]).submodule_search_locations[0])"
    directory = Path(subprocess.run([sys.executable, "-c", code, package], capture_output=True, text=True,
                                    env={**os.environ, "PRECOMPILE": "0"}).stdout.strip()) / "_precompiled"
    for manifest_file in sorted((directory / "sets").glob("*/manifest.json")):
        manifest = json.loads(manifest_file.read_text())
        if manifest["env"].get("gpu"):
            return directory, manifest
    return None


def probe(scratch: Path) -> dict:
    env = fresh_env(scratch, {})
    found = {"probe": run_json([sys.executable, "-c", PROBE], env)}
    for how in ("plain", "touch-cuda-first"):
        found[f"fork_{how}"] = run_json([sys.executable, "-c", FORK, "sample_pkg", how], fresh_env(scratch, {}))
    return found


# torch's own AOTInductor route on a plain model, each step in its own process: does this machine's
# loader open (and run) a CUDA package? A loader that crashes takes only its child down.
AOTI_BUILD = r"""
import sys, torch
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda().eval()
x = torch.randn(4, 64, device="cuda")
with torch.no_grad():
    program = torch.export.export(model, (x,))
torch._inductor.aoti_compile_and_package(program, package_path=sys.argv[1])
torch.save({"x": x.cpu(), "want": model(x).detach().cpu()}, sys.argv[1] + ".io")
"""
AOTI_OPEN = r"""
import sys, faulthandler, torch
faulthandler.enable()
io = torch.load(sys.argv[1] + ".io")
loader = torch._C._aoti.AOTIModelPackageLoader(sys.argv[1], "model", False, 1, -1)
out = loader.run([io["x"].cuda()])[0]
print("@@" + str(float((out.cpu() - io["want"]).abs().max())))
"""


def probe_loader(scratch: Path) -> dict:
    """Whether torch's AOTInductor loader opens and runs a CUDA package here (each in a child)."""
    package = scratch / "probe.pt2"
    env = fresh_env(scratch, {})
    built = subprocess.run([sys.executable, "-c", AOTI_BUILD, str(package)], env=env, capture_output=True, text=True,
                           timeout=600)
    if built.returncode != 0:
        return {"built": False, "exit": built.returncode, "stderr": built.stderr[-2000:]}
    opened = subprocess.run([sys.executable, "-c", AOTI_OPEN, str(package)], env=env, capture_output=True, text=True,
                            timeout=300)
    error = next((line[2:] for line in opened.stdout.splitlines() if line.startswith("@@")), None)
    return {"built": True, "exit": opened.returncode, "max_error": error, "stderr": opened.stderr[-2000:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--find-links", required=True)
    parser.add_argument("--projects", nargs="+", default=["sample_pkg", "gpu_block"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE[,VAR=VALUE]",
                        help="one more precompiled row of sample_pkg with these variables ({scratch}: the bench's scratch dir, {out}: --out; "
                             "BENCH_PROFILE=FILE profiles its first step)")
    parser.add_argument("--probe-loader", action="store_true", help="first, torch's AOTInductor loader on a plain model")
    parser.add_argument("--quick", action="store_true",
                        help="the prepared GPU check: the loader probe, sample_pkg's four rows and its exported "
                             "steps against eager, gpu_block cold against warm, then the GPU tests; one repeat")
    parser.add_argument("--tests-timeout", type=float, default=None,
                        help="run tests/integration/test_gpu.py for at most this many seconds (--quick: 240; 0: not)")
    args = parser.parse_args()
    if args.quick:
        args.probe_loader, args.repeats = True, 1
        args.tests_timeout = 240 if args.tests_timeout is None else args.tests_timeout
    cuda = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                          capture_output=True, text=True).stdout.strip() == "True"
    args.out.mkdir(parents=True, exist_ok=True)
    sys.stdout = _Tee(sys.stdout, args.out / "gpu.log")  # the one log: what this run printed
    scratch = Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    os.environ.update(compiler_shims(scratch))  # every process from here on: builds and runs alike
    variants = {}
    for spec in args.variant:
        name, _, assignments = spec.partition(":")
        variants[name] = dict(a.split("=", 1) for a in assignments.split(",") if a)
    results: dict = {"python": sys.version.split()[0], "projects": {}, "machine": machine()}
    print("== " + json.dumps(results["machine"]), flush=True)
    try:
        if args.probe_loader and cuda:
            results["loader"] = probe_loader(scratch)
            print("== torch's AOTInductor loader on a plain CUDA model:", json.dumps(results["loader"])[:600], flush=True)
        for spec in args.projects:
            name, _, mode = spec.partition("@")
            extra = {"GPU_BLOCK_COMPILE_MODE": mode} if mode else {}
            print(f"== {spec}: building", flush=True)
            entry = build_and_install(name, mode or None, args.find_links, args.out, scratch)
            for line in entry["build_lines"]:
                print("   " + line, flush=True)
            found = installed_set(name)
            megacache = scratch / f"megacache-{name}.bin"  # written by the cold row
            if found:
                directory, manifest = found
                entry["timings"] = manifest["timings"]
                entry["workload_seconds"] = [w["seconds"] for w in manifest["workloads"]]
                entry["files"] = len(manifest["files"])
                entry["best_configs"] = sum(p.endswith(".best_config") for p in manifest["files"])
                print(f"   timings {entry['timings']}, workloads {entry['workload_seconds']}, "
                      f"{entry['best_configs']} tuned configs shipped", flush=True)
            paths = ["cold", "precompiled"] if args.quick and name != "sample_pkg" else args.paths
            rows = [(path, path, extra) for path in paths]
            rows += [(variant, "precompiled", {**extra, **{k: v.format(scratch=scratch, out=args.out) for k, v in env.items()}})
                     for variant, env in variants.items() if name == "sample_pkg"]
            entry["runs"] = {row: [] for row, _, _ in rows}
            for repeat in range(args.repeats):
                for row, path, env in rows:
                    if path == "megacache" and not megacache.is_file():  # no cold row ran before it
                        continue
                    run = measure(name, path, megacache, scratch, env)
                    entry["runs"][row].append(run)
                    print(f"   {row:12s} step {run['first_step_seconds']:7.2f} s  predict {run['first_predict_seconds']:6.2f} s"
                          f"  aot {run['aot_autograd']}  counted {run['counted']}  loaded={run['loaded']}", flush=True)
                    print(f"   {'':12s} phases {run['phases']}  modules without .pyc {run.get('modules_without_pyc')}"
                          f" ({run.get('torch_modules')} torch modules loaded)", flush=True)
                    if run.get("served"):
                        print(f"   {'':12s} served untraced: {run['served']}", flush=True)
            results["projects"][spec] = entry
            if name == "sample_pkg" and "probe" not in results and cuda:
                results["probe"] = probe(scratch)
                print("   probe:", json.dumps(results["probe"]), flush=True)
            if name == "sample_pkg" and "steps" not in results:
                results["steps"] = check_steps(scratch)
                print("   steps against eager (other weights, a batch of 7):", json.dumps(results["steps"]), flush=True)
            (args.out / "gpu-results.json").write_text(json.dumps(results, indent=1))
        if args.tests_timeout:
            print("== tests/integration/test_gpu.py", flush=True)
            results["tests"] = run_tests(args.out, args.tests_timeout)
            print("   " + json.dumps(results["tests"]), flush=True)
            (args.out / "gpu-results.json").write_text(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print_table(results)
    return 0


class _Tee:
    """Standard output, and a copy of it in a file."""

    def __init__(self, stream: Any, path: Path) -> None:
        self.stream, self.file = stream, path.open("w")

    def write(self, text: str) -> int:
        self.file.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.file.flush()
        self.stream.flush()


def machine() -> dict:
    """The date, GPU, driver, torch, Triton and CUDA this run measured."""
    code = ("import json, torch; t = None\ntry:\n    import triton; t = triton.__version__\nexcept ImportError:\n    pass\n"
            "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, 'triton': t, "
            "'gpu': torch.cuda.get_device_name() if torch.cuda.is_available() else None}))")
    found = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout or "{}")
    smi = shutil.which("nvidia-smi")
    driver = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                            text=True).stdout.strip() if smi else None
    return {"date": time.strftime("%Y-%m-%d"), **found, "driver": driver, "python": sys.version.split()[0]}


BREAKDOWN = ("cuda_init", "dynamo", "aot_cache_load", "fx_cache_load", "bundle_emit", "module_load", "kernel_load",
             "triton_c_module", "compile_pool", "triton_key")


def print_table(results: dict) -> None:
    print("\n| project | path | first step | first inference | AOTAutograd hit/miss | FX graph hit/miss | Triton compiles | autotune benchmarks | GEMM autotunes | compiler processes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for spec, entry in results["projects"].items():
        for path, runs in entry["runs"].items():
            if not runs:
                continue
            step = statistics.median(r["first_step_seconds"] for r in runs)
            predict = statistics.median(r["first_predict_seconds"] for r in runs)
            last = runs[-1]
            aot, ind, cnt = last["aot_autograd"], last["inductor"], last["counted"]
            execs = ", ".join(f"{k[5:]} {v}" for k, v in cnt.items() if k.startswith("exec_")) or "0"
            print(f"| {spec} | {path} | {step:.2f} s | {predict:.2f} s | "
                  f"{aot.get('autograd_cache_hit', 0)}/{aot.get('autograd_cache_miss', 0)} | "
                  f"{ind.get('fxgraph_cache_hit', 0)}/{ind.get('fxgraph_cache_miss', 0)} | "
                  f"{cnt.get('triton_compile', 0)} | {cnt.get('autotune_benchmark', 0)} | "
                  f"{ind.get('select_algorithm_autotune', 0)} | {execs} |")
    print("\nWhere each first run's time went (seconds inside each phase, all its processes; phases nest: "
          "Dynamo's compile holds the cache and kernel loads):\n")
    print("| project | path | import | " + " | ".join(BREAKDOWN) + " |")
    print("|---|---|---|" + "---|" * len(BREAKDOWN))
    for spec, entry in results["projects"].items():
        for path, runs in entry["runs"].items():
            if runs:
                spent = runs[0]["phases"]
                print(f"| {spec} | {path} | {runs[0]['import_seconds']:.2f} | "
                      + " | ".join(f"{spent[p]:.2f}" if p in spent else "-" for p in BREAKDOWN) + " |")


if __name__ == "__main__":
    sys.exit(main())
