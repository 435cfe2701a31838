"""``hatch-precompile verify``: do the artifacts still cover what the package compiles?

Runs the package's workloads in a fresh process with an empty Inductor cache dir, after
``load()`` (_replay.py), and counts what did not come from the caches: AOTAutograd and FX graph
misses and bypasses, and new kernel binaries (each one a g++ run). Any miss fails: the Julia
``@warnpcfail`` for a package's CI, catching artifacts gone stale after a code change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from hatch_precompile._child import BUILDING_VAR, EXIT_WORKLOAD_FAILED, TORCHSCRIPT_DIR_VAR
from hatch_precompile.capture import _kill_group


class VerifyError(Exception):
    """verify could not run the workloads at all (as opposed to finding misses)."""


def run(package: str, workloads: list[str], timeout: float, say: Callable[[str], None]) -> dict[str, Any]:
    """The child's result.json, plus ``misses``: one line per thing that was compiled here."""
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-verify-") as tmp:
        work = Path(tmp)
        (work / "cache").mkdir()
        (work / "out").mkdir()
        spec = work / "spec.json"
        spec.write_text(json.dumps({"package": package, "workloads": workloads, "out": str(work / "out")}))
        env = {k: v for k, v in os.environ.items() if k not in (BUILDING_VAR, TORCHSCRIPT_DIR_VAR)}
        env["TORCHINDUCTOR_CACHE_DIR"] = str(work / "cache")
        code = (
            "import sys; sys.path.insert(0, sys.argv.pop(1)); "
            "from hatch_precompile._replay import main; "
            # This very hatch_precompile, then that dir off the front again: it must not shadow the
            # packages the workload imports (e.g. an unpacked wheel on PYTHONPATH).
            "sys.path.pop(0); sys.exit(main(sys.argv))"
        )
        say(f"verify {package}: load(), then {len(workloads)} workload(s) in a fresh process "
            "with an empty Inductor cache dir")
        # The workloads' own output goes to stderr, so that stdout stays the report (--json).
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(Path(__file__).resolve().parents[1]), str(spec)],
            env=env, stdout=2, stderr=None, stdin=subprocess.DEVNULL,
            start_new_session=True,  # one process group: a timeout kills what the workload started
        )
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise VerifyError(f"the workloads did not finish within {timeout:g} s (--timeout)") from None
        result_file = work / "out" / "result.json"
        result = json.loads(result_file.read_text()) if result_file.is_file() else {}
    if returncode == EXIT_WORKLOAD_FAILED and "error" in result:
        error = result["error"]
        raise VerifyError(f"{error['workload']} failed:\n{error['traceback']}")
    if returncode != 0 or "load" not in result:
        raise VerifyError(f"the verify process exited with code {returncode}")
    result["misses"] = misses(package, result)
    return result


def misses(package: str, result: dict[str, Any]) -> list[str]:
    found = []
    load = result["load"]
    if not load["loaded"]:
        found.append(f"load() installed nothing: {load['reason']}")
    for w in result["workloads"]:
        attributed = 0
        for g in w["graphs"]:
            missed = g["aot_misses"] + g["fx_misses"]
            if not missed:
                continue
            attributed += missed
            why = (
                f"recompiled ({g['recompile_reason'].strip()}) into a variant the artifacts do not have"
                if g.get("recompile_reason")
                else "not in the artifacts: the code, input shapes/dtypes or torch config changed "
                "since they were built"
            )
            found.append(
                f"{w['name']}: the {g['kind']} graph of {g['function'] or '?'} at {g['location'] or '?'} "
                f"[{g['compile_id']}] was compiled from scratch ({g['seconds']:.1f} s): {why}"
            )
        aot = w["counters"].get("aot_autograd", {})
        fx = w["counters"].get("inductor", {})
        counted = aot.get("autograd_cache_miss", 0) + fx.get("fxgraph_cache_miss", 0)
        if counted > attributed:
            found.append(f"{w['name']}: {counted - attributed} cache miss(es) not tied to a recorded graph")
        for kind, count in (("AOTAutograd", aot.get("autograd_cache_bypass", 0)),
                            ("FX graph", fx.get("fxgraph_cache_bypass", 0))):
            if count:
                found.append(f"{w['name']}: {count} graph(s) bypassed the {kind} cache (torch does not cache them)")
        if w["kernels_compiled"]:
            found.append(f"{w['name']}: {w['kernels_compiled']} C++ kernel(s) were compiled")
    return found


def render(package: str, result: dict[str, Any]) -> str:
    load = result["load"]
    out = [
        f"  load(): {'installed' if load['loaded'] else 'skipped'} "
        f"({load['reason']}; {load['installed']} file(s) written, {result['kernels_installed']} kernel binaries)"
    ]
    for w in result["workloads"]:
        aot = w["counters"].get("aot_autograd", {})
        fx = w["counters"].get("inductor", {})
        out.append(
            f"  workload {w['name']}: {w['seconds']:.1f} s; AOTAutograd {aot.get('autograd_cache_hit', 0)} hit(s), "
            f"{aot.get('autograd_cache_miss', 0)} miss(es); FX graph {fx.get('fxgraph_cache_hit', 0)} hit(s), "
            f"{fx.get('fxgraph_cache_miss', 0)} miss(es); {w['kernels_compiled']} kernel(s) compiled"
        )
    if not result["misses"]:
        out.append(f"OK: everything the workloads compiled came from {package}'s precompiled caches")
    else:
        out.extend(f"MISS: {line}" for line in result["misses"])
        out.append(
            f"FAILED: {len(result['misses'])} miss(es); the artifacts do not cover this code or "
            f"environment: rebuild the wheel (pip install --no-build-isolation ...) or run "
            f"`hatch-precompile warm {package}`"
        )
    return "\n".join(out) + "\n"
