"""``hatch-precompile report``: a manifest in human form (or a JSON summary of it).

What a build compiled and what it cost, the SnoopCompile view: per workload its wall time, the
graphs compiled with their compile seconds (largest first), graph breaks and recompiles with
their source locations, float64 computed inside compiled graphs; what was captured and how big.
Pure functions over the typed Manifest; the CLI finds the manifests (command_targets.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hatch_precompile.child import performance_pitfalls
from hatch_precompile.protocol import ENV_FIELDS, SETS_DIR, Manifest, file_kind
from hatch_precompile.protocol import workloads as workload_records
from hatch_precompile.tools.command_targets import Artifacts


def summarize(manifest: Manifest) -> dict[str, Any]:
    """The JSON ``summary`` of one manifest: what it holds by kind, and each workload's graphs."""
    sizes = manifest.bytes_by_kind()
    workloads = []
    for w in workload_records.of(manifest):
        graphs = sorted(w.graphs or [], key=lambda g: -(g.seconds or 0))
        workloads.append(
            {
                "name": w.name,
                "seconds": w.seconds,
                "graphs": [dataclasses.asdict(g) for g in graphs],
                "graphs_recorded": w.graphs is not None,
                "unique_graphs": w.unique_graphs,
                "counters": w.counters,
                "kernels": w.kernels,
                "cache_bytes": w.cache_bytes,
                "graph_breaks": w.graph_breaks,
                "recompiles": w.recompiles,
                "float64": w.float64 or [],
                "float64_recorded": w.float64 is not None,
            }
        )
    return {
        "package": manifest.package,
        "generator": manifest.generator,
        "env": manifest.env,
        "python_full": manifest.python_full,
        "timings": manifest.timings,
        "files": len(manifest.files),
        "bytes": sum(sizes.values()),
        "sizes": {
            "aotautograd": sizes["aotautograd"],
            "fxgraph": sizes["fxgraph"],
            "kernel_binaries": sizes["kernel_binary"],
            "other_inductor": sizes["other_inductor"],
            "megacache": sizes["megacache"],
            "torchscript": sizes["torchscript"],
            "steps": sizes["step"],
        },
        "aotautograd_entries": manifest.count("aotautograd"),
        "fxgraph_entries": manifest.count("fxgraph"),
        "kernel_binaries": manifest.count("kernel_binary"),
        "relocatable_kernels": len(manifest.kernels),
        "torchscript": sorted(manifest.torchscript),
        "steps": sorted({p.split("/", 1)[1].rsplit(".", 1)[0] for p in manifest.files if file_kind(p) == "step"}),
        "step_routes": manifest.steps,
        "workloads": workloads,
        "compile_times": manifest.compile_times,
        "warmed": manifest.warmed,
        "served": manifest.served,
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
                "summary": summarize(a.manifest) if a.manifest is not None else None,
                "manifest": a.raw,
            }
            for a in found
        ],
        "storage": storage(found),
    }


def storage(found: list[Artifacts]) -> list[dict[str, Any]]:
    """Per artifact dir: its sets, the bytes its blobs take, and what separate copies would take."""
    groups: dict[str, list[Artifacts]] = {}
    for a in found:
        groups.setdefault(a.location.rsplit(f"/{SETS_DIR}/", 1)[0], []).append(a)
    out = []
    for location, sets in groups.items():
        entries = [e for a in sets if a.manifest is not None for e in a.manifest.files.values()]
        out.append({
            "location": location,
            "sets": len(sets),
            "bytes_stored": sum({e.sha256: e.size for e in entries}.values()),
            "bytes_if_separate": sum(e.size for e in entries),
        })
    return out


def _mb(n: int | None) -> str:
    return f"{(n or 0) / 1e6:.2f} MB"


def render(found: list[Artifacts]) -> str:
    out: list[str] = []
    for artifacts in found:
        where = "shipped" if artifacts.origin == "shipped" else "stored by `hatch-precompile warm`"
        out.append(f"{artifacts.package}: precompiled artifacts {where}, {artifacts.location}")
        if artifacts.problem:
            out.append(f"  problem: {artifacts.problem} (load() would not use these)")
        if artifacts.manifest is not None:
            out.extend(_render_one(summarize(artifacts.manifest)))
        out.append("")
    for group in storage(found):
        if group["sets"] > 1:
            out.append(
                f"{group['location']}: {group['sets']} artifact sets in {_mb(group['bytes_stored'])} "
                f"({_mb(group['bytes_if_separate'])} if each set stored its own copy of the files they share)"
            )
    return "\n".join(out).rstrip() + "\n"


def _render_one(s: dict[str, Any]) -> list[str]:
    out = []
    env = s["env"]
    keys = [k for k in ENV_FIELDS if k in env] + sorted(k for k in env if k not in ENV_FIELDS)
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
    steps = ", ".join(s["steps"]) or "none"
    out.append(f"    captured steps       {len(s['steps']):4}  {_mb(sizes['steps'])}  ({steps})")
    for name, step in sorted((s.get("step_routes") or {}).items()):
        out.append(f"      {name}: {describe_step(step)}")
    served = s.get("served")
    if isinstance(served, dict):
        out.append(f"  compiled functions: served {served.get('served')} of {served.get('functions')} untraced "
                   f"(proven in a fresh process at build: {served.get('proof') or 'nothing to prove'})")
        out.extend(f"    compiled by a dependency: {name}" for name in served.get("by_dependencies") or ())
        out.extend(f"    not served: {name}: {why}" for name, why in sorted((served.get("not_served") or {}).items()))
    for w in s["workloads"]:
        out.extend(_render_workload(w))
    phases = compile_phases(s["compile_times"])
    if phases:
        shown = sorted(phases, key=lambda p: -p[1])[:TOP_PHASES]
        out.append(
            f"  compile time by phase, top {len(shown)} of {len(phases)} "
            "(torch._dynamo.utils.compile_times, all workloads; phases nest; --json has all):"
        )
        out.extend(f"    {seconds:8.2f} s  {name}" for name, seconds in shown)
    return out


TOP_PHASES = 12


def compile_phases(text: Any) -> list[tuple[str, float]]:
    """``compile_times(repr="str", aggregate=True)`` lines ``name, seconds`` as pairs."""
    phases = []
    for line in str(text or "").splitlines():
        name, _, value = line.rpartition(",")
        try:
            phases.append((name.strip(), float(value)))
        except ValueError:
            continue  # the title and header lines
    return phases


def describe_step(step: dict[str, Any]) -> str:
    """``aotinductor, exported with torch 2.13.0+cpu, proven on 2.14.1: input 0 [s0 1..256, 32]``."""
    line = f"{step.get('route')}, captured with torch {step.get('torch')}"
    if step.get("proven"):
        line += f", proven on torch {', '.join(step['proven'])}"
    ranges = step.get("ranges") or {}
    inputs = []
    for i, dims in enumerate(step.get("inputs") or []):
        if isinstance(dims, list) and all(isinstance(d, (int, str)) for d in dims):
            shown = [d if isinstance(d, int) else f"{d} {ranges.get(d, ['?', None])[0]}.."
                     f"{'' if ranges.get(d, [0, None])[1] is None else ranges[d][1]}" for d in dims]
            inputs.append(f"input {i} [{', '.join(map(str, shown))}]")
        else:
            inputs.append(f"input {i} = {dims[1] if isinstance(dims, list) and len(dims) == 2 else dims}")
    return line + (": " + "; ".join(inputs) if inputs else "")


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
            where = f"{g['function'] or '?'} at {g['location'] or '?'}"
            extra = f", {g['ops']} ops" if g["ops"] else ""
            kind = " (backward graph)" if g["kind"] == "backward" else ""
            line = f"      {g['seconds'] or 0:7.2f} s  {where} [{g['compile_id']}{extra}]{kind}"
            out.append(line)
            if g["recompile_reason"]:
                out.append(f"                 recompiled because: {g['recompile_reason'].strip()}")
            if g.get("restart_seconds"):
                out.append(f"                 {performance_pitfalls.restarted_trace_line(g)}")
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
