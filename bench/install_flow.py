#!/usr/bin/env python3
"""What a plain ``pip install`` of a package costs, before and after, in the two ways users install.

    python3 bench/install_flow.py [--before GIT_REF] [--flows torch-first pinned] [--out bench-out/install-flow]

For each hatch-precompile version -- ``--before`` (a git ref of this repository) and this
checkout -- in one run, each flow into a fresh venv:

- ``torch-first``: ``pip install torch==2.13.0``, then ``pip install -v ./sample_pkg`` (timed);
- ``pinned``: one command, ``pip install -v torch==2.13.0 ./sample_pkg`` (timed);
- ``dockerfile``: a Dockerfile's steps without the engine (none runs here): ``RUN python -m venv
  /venv``, ``RUN pip install -r requirements.txt`` (torch pinned there, ``./sample_pkg`` beside
  it), timed together as the image build; the first step then runs as a fresh container would,
  with only ``PATH`` set and an empty ``HOME``;

then the wheels pip put into the isolated build env (read from its log, bytes summed; where they
came from this machine's disk they would elsewhere be downloads), and ``python -m sample_pkg
--json`` in a fresh process with an empty ``TORCHINDUCTOR_CACHE_DIR``: the first training step,
the AOTAutograd hits and misses, kernels compiled, and what load() said.

Prints one table and writes ``results.json``. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH = os.environ.get("BENCH_TORCH", "torch==2.13.0")
BEFORE = "30e1331"  # before the installer's torch pins reached the build env
SIZE = re.compile(r"\(([\d.]+) (kB|MB|GB)\)")
UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}


def sh(*cmd, env=None, cwd=None) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PRECOMPILE", "HATCH_", "TORCH"))}
    full_env.pop("VIRTUAL_ENV", None)
    full_env.update(env or {})
    proc = subprocess.run([str(c) for c in cmd], env=full_env, cwd=cwd, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{proc.stdout[-5000:]}")
    return proc.stdout


def hp_wheel(ref: str | None, out: Path) -> Path:
    """hatch-precompile's wheel from this checkout (``ref`` None) or from a git ref of it."""
    source = ROOT
    if ref is not None:
        source = out / f"src-{ref}"
        source.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    dist = out / f"hp-{ref or 'this'}"
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, source)
    return dist


def build_env_bytes(log: str) -> tuple[int, list[str]]:
    """Bytes of the wheels pip installed into the isolated build env, from `pip install -v`'s log."""
    sections = re.findall(r"Installing (?:build|backend) dependencies: started\n(.*?)"
                          r"Installing (?:build|backend) dependencies: finished", log, re.S)
    total, names = 0, []
    for line in "\n".join(sections).splitlines():
        found = re.search(r"(?:Processing|Downloading|Using cached) (\S+\.whl)", line)
        if not found:
            continue
        name = found[1].rsplit("/", 1)[-1]
        size = SIZE.search(line)
        if size:
            total += int(float(size[1]) * UNITS[size[2]])
        elif os.path.isfile(found[1]):
            total += os.path.getsize(found[1])
        names.append(name)
    return total, names


def measure(label: str, flow: str, hp_dir: Path, out: Path) -> dict:
    venv = out / f"venv-{label}-{flow}"
    sh(sys.executable, "-m", "venv", "--clear", venv)
    python = venv / "bin" / "python"
    project = out / f"sample_pkg-{label}-{flow}"
    shutil.copytree(ROOT / "sample_pkg", project, ignore=shutil.ignore_patterns("dist", "__pycache__"))
    links = " ".join([os.environ.get("PIP_FIND_LINKS", ""), str(hp_dir)]).strip()
    if flow == "torch-first":
        sh(python, "-m", "pip", "install", "-q", TORCH)
        command = [project]
    elif flow == "pinned":
        command = [TORCH, project]
    else:
        (out / f"requirements-{label}.txt").write_text(f"{TORCH}\n./{project.name}\n")
        command = ["-r", f"requirements-{label}.txt"]
    print(f"- {label}, {flow}: pip install {' '.join(map(str, command))} ...", flush=True)
    started = time.perf_counter()
    if flow == "dockerfile":  # the image build: both RUN steps
        sh(sys.executable, "-m", "venv", "--clear", venv)
    log = sh(python, "-m", "pip", "install", "-v", *command, env={"PIP_FIND_LINKS": links}, cwd=out)
    seconds = time.perf_counter() - started
    (out / f"pip-{label}-{flow}.log").write_text(log)
    bytes_, wheels = build_env_bytes(log)
    line = next((text.strip() for text in log.splitlines() if "precompile: building artifacts for" in text), None)
    with tempfile.TemporaryDirectory(prefix="install-flow-cache-") as cache:
        if flow == "dockerfile":  # `docker run image python -m sample_pkg`: nothing but the image
            home = Path(cache) / "home"
            home.mkdir()
            proc = subprocess.run([str(python), "-m", "sample_pkg", "--json"], capture_output=True, text=True,
                                  env={"PATH": os.environ["PATH"], "HOME": str(home), "TORCHINDUCTOR_CACHE_DIR": cache},
                                  cwd=home, check=True)
            result = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            # Not from this checkout's dir, nor the cache dir: `-m` puts the working dir first on
            # sys.path, where a cache shard named like a module torch imports (`z3/`) shadows it.
            result = json.loads(sh(python, "-m", "sample_pkg", "--json", env={"TORCHINDUCTOR_CACHE_DIR": f"{cache}/cache"},
                                   cwd=cache).strip().splitlines()[-1])
    return {"install_seconds": seconds, "build_env_bytes": bytes_, "build_env_wheels": wheels,
            "build_line": line, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help="git ref of the version to compare against")
    parser.add_argument("--flows", nargs="+", default=["torch-first", "pinned", "dockerfile"],
                        choices=["torch-first", "pinned", "dockerfile"])
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "install-flow")
    args = parser.parse_args()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    versions = {f"before ({args.before})": hp_wheel(args.before, out), "after": hp_wheel(None, out)}
    results = {flow: {label: measure(label.split()[0], flow, hp, out) for label, hp in versions.items()}
               for flow in args.flows}
    for flow, rows in results.items():
        print(f"\n{flow}: {'hatch-precompile':<22}{'install':>9}{'build-env wheels':>18}{'1st step':>10}"
              f"{'AOT hit/miss':>14}{'kernels built':>15}  torch")
        for label, r in rows.items():
            aot = r["aot_autograd"]
            print(f"{'':<{len(flow) + 2}}{label:<22}{r['install_seconds']:>8.1f}s{r['build_env_bytes'] / 1e6:>15.1f} MB"
                  f"{r['first_step_seconds']:>9.2f}s{aot.get('autograd_cache_hit', 0):>8}/"
                  f"{aot.get('autograd_cache_miss', 0):<5}{r['kernels_compiled']:>15}  {r['torch']}")
            print(f"{'':<{len(flow) + 24}}{r['build_line']}")
            print(f"{'':<{len(flow) + 24}}load(): {r['precompile_reason']}")
    (out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
