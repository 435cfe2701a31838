"""``hatch-precompile report``: a manifest in human form (or a JSON summary of it).

What a build compiled and what it cost, the SnoopCompile view: per workload its wall time, the
graphs compiled with their compile seconds (largest first), graph breaks and recompiles with
their source locations, float64 computed inside compiled graphs; what was captured and how big.
Pure functions over the manifest dict; the CLI finds the manifests (targets.py).
"""

from __future__ import annotations

from typing import Any

from hatch_precompile.targets import Artifacts

_ENV_ORDER = ("python", "torch", "system", "machine", "cpu_capability", "cxx", "cuda", "triton", "gpu")


def summarize(data: dict[str, Any]) -> dict[str, Any]:
    files: dict[str, dict[str, Any]] = data.get("files") or {}

    def size(paths: list[str]) -> int:
        return sum(files[p].get("size", 0) for p in paths)

    aot = [p for p in files if p.startswith("inductor/aotautograd/")]
    fx = [p for p in files if p.startswith("inductor/fxgraph/")]
    so = [p for p in files if p.endswith(".so")]
    inductor = [p for p in files if p.startswith("inductor/")]
    torchscript = [p for p in files if p.startswith("torchscript/")]
    megacache = [p for p in files if p == "megacache.bin"]
    workloads = []
    for workload in data.get("workloads") or []:
        graphs = sorted(workload.get("graphs") or [], key=lambda g: -(g.get("seconds") or 0))
        workloads.append(
            {
                "name": workload.get("name"),
                "seconds": workload.get("seconds"),
                "graphs": graphs,
                "graphs_recorded": "graphs" in workload,
                "unique_graphs": (workload.get("counters") or {}).get("stats", {}).get("unique_graphs"),
                "counters": workload.get("counters") or {},
                "kernels": workload.get("kernels"),
                "cache_bytes": workload.get("cache_bytes"),
                "graph_breaks": workload.get("graph_breaks") or [],
                "recompiles": workload.get("recompiles") or [],
                "float64": workload.get("float64") or [],
                "float64_recorded": "float64" in workload,
            }
        )
    return {
        "package": data.get("package"),
        "generator": data.get("generator"),
        "env": data.get("env") or {},
        "python_full": data.get("python_full"),
        "timings": data.get("timings") or {},
        "files": len(files),
        "bytes": size(list(files)),
        "sizes": {
            "aotautograd": size(aot),
            "fxgraph": size(fx),
            "kernel_binaries": size(so),
            "other_inductor": size(inductor) - size(aot) - size(fx) - size(so),
            "megacache": size(megacache),
            "torchscript": size(torchscript),
        },
        "aotautograd_entries": len(aot),
        "fxgraph_entries": len(fx),
        "kernel_binaries": len(so),
        "relocatable_kernels": len(data.get("kernels") or []),
        "torchscript": sorted((data.get("torchscript") or {}).keys()),
        "workloads": workloads,
        "compile_times": data.get("compile_times"),
        "warmed": data.get("warmed"),
    }


def as_json(target: str, kind: str, found: list[Artifacts]) -> dict[str, Any]:
    return {
        "target": target,
        "kind": kind,
        "artifacts": [
            {
                "package": a.package,
                "origin": a.origin,
                "location": a.location,
                "problem": a.problem,
                "summary": _summary_or_none(a.data),
                "manifest": a.data,
            }
            for a in found
        ],
    }


def _summary_or_none(data: dict[str, Any] | None) -> dict[str, Any] | None:
    try:
        return summarize(data) if data is not None else None
    except (TypeError, KeyError, AttributeError, ValueError):
        return None


def _mb(n: int | None) -> str:
    return f"{(n or 0) / 1e6:.2f} MB"


def render(target: str, found: list[Artifacts]) -> str:
    out: list[str] = []
    for artifacts in found:
        where = "shipped" if artifacts.origin == "shipped" else "stored by `hatch-precompile warm`"
        out.append(f"{artifacts.package}: precompiled artifacts {where}, {artifacts.location}")
        if artifacts.problem:
            out.append(f"  problem: {artifacts.problem} (load() would not use these)")
        if artifacts.data is not None:
            try:
                out.extend(_render_one(summarize(artifacts.data)))
            except (TypeError, KeyError, AttributeError, ValueError) as exc:  # a hand-edited manifest
                out.append(f"  cannot summarise this manifest: {exc!r} (--json shows it as it is)")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _render_one(s: dict[str, Any]) -> list[str]:
    out = []
    env = s["env"]
    keys = [k for k in _ENV_ORDER if k in env] + sorted(k for k in env if k not in _ENV_ORDER)
    out.append("  environment key (must match where it is loaded):")
    out.extend(f"    {k:15} {env[k]}" for k in keys if env[k] is not None)
    timings = s["timings"]
    out.append(
        f"  built by {s['generator'] or '?'} with Python {s['python_full'] or '?'}"
        + (f" in {timings['total_seconds']:.1f} s" if "total_seconds" in timings else "")
        + (f" (torch import {timings['torch_import_seconds']:.1f} s)" if "torch_import_seconds" in timings else "")
    )
    warmed = s["warmed"]
    if isinstance(warmed, dict):
        out.append(
            f"  warmed at {warmed.get('at')} for {s['package']} {warmed.get('package_version') or '(version unknown)'}"
            " (stale after an upgrade of the package: `verify` tells, `warm` again fixes)"
        )
    sizes = s["sizes"]
    out.append(f"  {s['files']} files, {_mb(s['bytes'])}:")
    out.append(f"    AOTAutograd entries  {s['aotautograd_entries']:4}  {_mb(sizes['aotautograd'])}")
    out.append(f"    FX graph entries     {s['fxgraph_entries']:4}  {_mb(sizes['fxgraph'])}")
    out.append(
        f"    kernel binaries      {s['kernel_binaries']:4}  {_mb(sizes['kernel_binaries'])}"
        f"  ({s['relocatable_kernels']} relocatable across install paths)"
    )
    out.append(f"    other Inductor files       {_mb(sizes['other_inductor'])}  (kernel sources, output code)")
    out.append(f"    Mega-Cache                 {_mb(sizes['megacache'])}")
    names = ", ".join(s["torchscript"]) or "none"
    out.append(f"    TorchScript modules  {len(s['torchscript']):4}  {_mb(sizes['torchscript'])}  ({names})")
    for w in s["workloads"]:
        out.extend(_render_workload(w))
    phases = _phases(s["compile_times"])
    if phases:
        shown = sorted(phases, key=lambda p: -p[1])[:TOP_PHASES]
        out.append(
            f"  compile time by phase, top {len(shown)} of {len(phases)} "
            "(torch._dynamo.utils.compile_times, all workloads; phases nest; --json has all):"
        )
        out.extend(f"    {seconds:8.2f} s  {name}" for name, seconds in shown)
    return out


TOP_PHASES = 12


def _phases(text: Any) -> list[tuple[str, float]]:
    """``compile_times(repr="str", aggregate=True)`` lines ``name, seconds`` as pairs."""
    phases = []
    for line in str(text or "").splitlines():
        name, _, value = line.rpartition(",")
        try:
            phases.append((name.strip(), float(value)))
        except ValueError:
            continue  # the title and header lines
    return phases


def _render_workload(w: dict[str, Any]) -> list[str]:
    aot = w["counters"].get("aot_autograd", {})
    head = f"  workload {w['name']}: {w['seconds'] or 0:.1f} s"
    if w["kernels"] is not None:
        head += f", {w['kernels']} kernel(s) built, {_mb(w['cache_bytes'])} of cache"
    head += (
        f"; AOTAutograd {aot.get('autograd_cache_miss', 0)} miss(es) / "
        f"{aot.get('autograd_cache_saved', 0)} saved"
    )
    out = [head]
    if w["graphs_recorded"]:
        out.append(f"    graphs compiled ({len(w['graphs'])}, largest compile time first):")
        for g in w["graphs"]:
            where = f"{g.get('function') or '?'} at {g.get('location') or '?'}"
            extra = f", {g['ops']} ops" if g.get("ops") else ""
            kind = " (backward graph)" if g.get("kind") == "backward" else ""
            line = f"      {g.get('seconds') or 0:7.2f} s  {where} [{g.get('compile_id')}{extra}]{kind}"
            out.append(line)
            if g.get("recompile_reason"):
                out.append(f"                 recompiled because: {g['recompile_reason'].strip()}")
    else:
        out.append(f"    graphs compiled: {w['unique_graphs'] or 0} (per-graph times not recorded by this version)")
    out.append(f"    graph breaks: {len(w['graph_breaks'])}")
    out.extend(f"      {b.get('location')}: {b.get('reason')}" for b in w["graph_breaks"])
    recompiles = [(r, reason) for r in w["recompiles"] for reason in r.get("reasons", [])]
    out.append(f"    recompiles: {len(recompiles)}")
    out.extend(f"      {r.get('function')} ({r.get('location')}): {reason}" for r, reason in recompiles)
    if not w["float64_recorded"]:
        out.append("    float64 in compiled graphs: not recorded by this version")
    elif not w["float64"]:
        out.append("    float64 in compiled graphs: none")
    else:
        total = sum(item["nodes"] for item in w["float64"])
        out.append(f"    float64 in compiled graphs: {total} node(s) (slow on most hardware; intended?)")
        for item in w["float64"]:
            ops = ", ".join(f"{op} x{n}" for op, n in item["ops"].items())
            out.append(f"      {item['location']} in {item['function']} [{item['compile_id']}]: {ops}")
    return out
