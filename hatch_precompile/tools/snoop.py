"""``hatch-precompile snoop``: SnoopCompile's ``@snoopi`` for real programs.

Runs a program (child/snoop_child.py) and reports every graph it compiled, largest first, with
its owning distribution and whether a cache -- for a hatch-precompile package, its own shipped
artifacts -- served it; per distribution ("parcel") the seconds compiled and served and the
coverage of its artifacts; the workload gaps (graphs of such a package compiled fresh, their call
signature against what its artifacts hold, a hint, and why torch's key differs, field by field:
tools/why.py); and the performance pitfalls found where
they happen: float64 in compiled graphs, graph breaks (``.item()``, ``print``, data-dependent
control flow), and recompiles from unstable shapes, dtypes or Python scalars.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.builder import torch_trace
from hatch_precompile.child import performance_pitfalls, supervisor
from hatch_precompile.errors import ChildError, SnoopError
from hatch_precompile.protocol import BUILDING_VAR, CACHE_DIR_VAR, TORCHSCRIPT_DIR_VAR
from hatch_precompile.tools import why

PROGRAM = "(program)"
_PYTHON = re.compile(r"python(\d+(\.\d+)?t?)?(\.exe)?")


def parse_command(command: list[str]) -> tuple[str, dict[str, Any]]:
    """(interpreter, what it runs) for ``python script.py ...``, ``python -m mod ...``,
    ``python -c code ...`` or a console script of this environment (``pytest ...``)."""
    if not command:
        raise SnoopError("give the program to run after --, e.g. -- python train.py")
    head, rest = command[0], command[1:]
    if _PYTHON.fullmatch(os.path.basename(head)):
        # A bare `python` is this environment's (the one snoop runs in); a path is that interpreter.
        python = sys.executable if os.sep not in head else head
        if not rest:
            raise SnoopError(f"{head} needs a script, -m module or -c code to run")
        if rest[0] == "-m" and len(rest) > 1:
            return python, {"kind": "module", "module": rest[1], "argv": [rest[1], *rest[2:]]}
        if rest[0] == "-c" and len(rest) > 1:
            return python, {"kind": "code", "code": rest[1], "argv": ["-c", *rest[2:]]}
        if rest[0].startswith("-"):
            raise SnoopError(f"the interpreter option {rest[0]!r} is not supported; give a script, -m or -c")
        return python, {"kind": "script", "path": rest[0], "argv": rest}
    name = os.path.basename(head)
    entries = [e for e in metadata.entry_points(group="console_scripts") if e.name == name]
    if not entries:
        raise SnoopError(
            f"{head!r} is neither python (a script, -m module, -c code) nor a console script of this "
            "environment"
        )
    return sys.executable, {"kind": "entry", "name": name, "value": entries[0].value, "argv": [head, *rest]}


def run(command: list[str], cache_dir: str | None, say: Callable[[str], None],
        trace: Path | None = None) -> dict[str, Any]:
    """Run the program observed; what the child reported. ``trace``: a dir for torch's structured
    trace of the program, rendered by tlparse where it is installed (builder/torch_trace.py)."""
    python, target = parse_command(command)
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-snoop-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in (BUILDING_VAR, TORCHSCRIPT_DIR_VAR)}
        env[CACHE_DIR_VAR] = cache_dir or str(Path(tmp) / "cache")
        say(f"snoop: running {' '.join(command)} with "
            + (f"the cache dir {cache_dir}" if cache_dir else "an empty Inductor cache dir")
            + (f", torch's trace into {trace}" if trace else ""))
        before = set(torch_trace.logs(trace)) if trace is not None and trace.is_dir() else set()
        # The program's own output goes to stderr, so that stdout stays the report (--json). A
        # program runs as long as it runs: no timeout (an interrupt stops it and all it started).
        # It keeps the user's temp dir, as it would run: there torch keeps its prefix header.
        job = supervisor.Job("hatch_precompile.child.snoop_child", {"target": target}, "snoop", say,
                         relay=lambda line: print(line, file=sys.stderr, flush=True), own_temp=False)
        try:
            child = supervisor.run(job, Path(tmp), python, env if trace is None else torch_trace.environ(env, trace))
        except ChildError as exc:
            raise SnoopError(f"the snoop process stopped before reporting: {exc.detail}") from None
        finally:  # a program that crashed is the one whose trace is most worth reading
            rendered = torch_trace.render(trace, before, python) if trace is not None else None
            for line in rendered.lines() if rendered else []:
                say(f"snoop: {line}")
    if child.status != "ok" or len(child.workloads) != 1:
        raise SnoopError(f"the snoop process reported {child.status}: {child.detail}")
    result = {**child.data, **child.workloads[0]}
    result["command"] = command
    result["fresh_cache"] = cache_dir is None
    result["trace"] = rendered.as_json() if rendered else None
    return result


def analyse(result: dict[str, Any], tmin: float, manifests: Callable[[str], list[Any]]) -> dict[str, Any]:
    """The report: graphs, distributions, gaps, pitfalls. ``manifests(package)`` gives the
    manifests of a package's artifact sets (what its artifacts hold)."""
    loads = {load["distribution"]: load for load in result["loads"]}
    graphs = [_graph(g, loads, result["fresh_cache"]) for g in result["graphs"]]
    graphs.sort(key=lambda g: -g["seconds"])
    report = {
        "command": result["command"],
        "exit_code": result["exit_code"],
        "tmin": tmin,
        "graphs": [g for g in graphs if g["seconds"] >= tmin],
        "distributions": _parcels(graphs, loads),
        "gaps": [gap for g in graphs if g["seconds"] >= tmin for gap in _gap(g, loads, manifests, result)],
        "pitfalls": performance_pitfalls.find(result, graphs),
        "loads": result["loads"],
        "steps": result.get("steps") or [],
        "served": result.get("served") or {},
        "counters": result.get("counters", {}),
        "trace": result.get("trace"),
    }
    return report


def _graph(g: dict[str, Any], loads: dict[str, Any], fresh_cache: bool) -> dict[str, Any]:
    from_cache = bool(g.get("aot_hits") or g.get("fx_hits")) and not (g.get("aot_misses") or g.get("fx_misses"))
    load = loads.get(g["distribution"])
    shipped = bool(from_cache and fresh_cache and load and load["loaded"])
    return {
        "function": g.get("function"), "location": g.get("location"), "distribution": g["distribution"],
        "compile_id": g.get("compile_id"), "kind": g.get("kind", "forward"), "seconds": g.get("seconds") or 0.0,
        "from_cache": from_cache, "from_shipped": shipped, "inputs": g.get("inputs"),
        "grad_mode": g.get("grad_mode"), "recompile_reason": g.get("recompile_reason"),
        "restart_seconds": g.get("restart_seconds") or 0.0, "restart_reasons": g.get("restart_reasons") or [],
    }


def _parcels(graphs: list[dict[str, Any]], loads: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for g in graphs:
        parcel = out.setdefault(g["distribution"], {"graphs": 0, "compiled_seconds": 0.0, "cached_seconds": 0.0})
        parcel["graphs"] += 1
        parcel["cached_seconds" if g["from_cache"] else "compiled_seconds"] += g["seconds"]
    for name, parcel in out.items():
        parcel["compiled_seconds"] = round(parcel["compiled_seconds"], 3)
        parcel["cached_seconds"] = round(parcel["cached_seconds"], 3)
        if name in loads:  # a hatch-precompile package: how much of it did its artifacts serve?
            served = sum(g["from_shipped"] for g in graphs if g["distribution"] == name)
            parcel["coverage"] = round(served / parcel["graphs"], 4)
            parcel["artifacts"] = loads[name]["reason"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["compiled_seconds"]))


def _gap(graph: dict[str, Any], loads: dict[str, Any], manifests: Callable[[str], list[Any]],
         observed: dict[str, Any]) -> list[dict[str, Any]]:
    load = loads.get(graph["distribution"])
    if load is None or graph["from_cache"] or graph["kind"] == "backward":  # a backward's gap is its forward's
        return []
    top = load["package"].split(".", 1)[0]
    sets = manifests(load["package"])
    shipped = [g for m in sets for g in why.same_function_graphs(m, graph["function"], graph["location"], top)]
    explanation = why.explain_graph(graph, observed.get("keys") or [], sets, top, observed)
    hint = gap_hint(graph, shipped)
    if explanation is not None and hint.startswith("this call of"):
        hint = (f"this call of {graph['function']} compiled fresh although the workload makes one like it; "
                f"{why.summary(explanation, limit=1)[0]}")
    return [{
        "function": graph["function"], "location": graph["location"], "distribution": graph["distribution"],
        "compile_id": graph["compile_id"], "kind": graph["kind"], "seconds": graph["seconds"],
        "signature": {"inputs": graph["inputs"], "grad_mode": graph["grad_mode"]},
        "shipped": [{"inputs": g.inputs, "grad_mode": g.grad_mode, "workload_graph": g.compile_id} for g in shipped],
        "hint": hint,
        "why": explanation,
    }]


def gap_hint(graph: dict[str, Any], shipped: list[Any]) -> str:
    """One line: how the workload could have covered this call."""
    name = graph["function"]
    if not shipped:
        return f"the workload never compiles {name}: add a call to it (as this program makes it) to the workload"
    if any(built.inputs is None for built in shipped):
        return (f"the artifacts hold {len(shipped)} graph(s) of {name}, but the version that built them did "
                "not record their inputs: rebuild with this hatch-precompile to see the difference")
    mine = {a["name"]: a for a in graph.get("inputs") or []}
    grad = graph.get("grad_mode")
    found = [(built.grad_mode == grad, _difference(mine, {a["name"]: a for a in built.inputs})) for built in shipped]
    for rank in _PRIORITY:  # the same grad mode's closest graph says the most
        for same_grad, (kind, text) in found:
            if same_grad and kind == rank:
                return text.format(name=name)
    if any(kind == "same" for _, (kind, _text) in found):
        mode = "under torch.no_grad()" if grad is False else "with grad enabled"
        return f"the workload never calls {name} {mode}, as this program does: add that call to the workload"
    return (f"the workload calls {name} with other inputs ({', '.join(sorted(mine)) or 'none'} here): add this "
            "program's call to the workload")


_PRIORITY = ("same", "dynamic", "shape", "dtype", "requires_grad")


def _difference(mine: dict[str, Any], theirs: dict[str, Any]) -> tuple[str, str]:
    """How one shipped graph's inputs differ from this call's: (kind, hint with {name})."""
    if set(mine) != set(theirs):
        return "inputs", ""
    for arg, here in mine.items():
        there = theirs[arg]
        if here.get("dtype") != there.get("dtype"):
            return "dtype", (f"the workload calls {{name}} with {arg} as {there.get('dtype')}; this program used "
                             f"{here.get('dtype')} -- add that call, or cast {arg} before the call")
        mine_shape, their_shape = here.get("shape") or [], there.get("shape") or []
        dims = [i for i, (a, b) in enumerate(zip(mine_shape, their_shape)) if a != b and not isinstance(b, str)]
        if len(mine_shape) != len(their_shape) or dims:
            dim = dims[0] if dims else 0
            return "shape", (f"the workload calls {{name}} with {arg} of shape {their_shape} only; this program "
                             f"used {mine_shape} -- make that the workload's first call of {{name}} (a later one "
                             f"compiles a dynamic graph), or mark dim {dim} dynamic "
                             f"(torch._dynamo.mark_dynamic({arg}, {dim}))")
        dynamic = [i for i, d in enumerate(their_shape) if isinstance(d, str) and not isinstance(mine_shape[i], str)]
        if dynamic:
            return "dynamic", (f"the artifacts hold {{name}} with {arg} dim {dynamic[0]} dynamic {their_shape}, but "
                               "this program's first call compiled it static, as Dynamo does in a new process: mark "
                               f"that dim dynamic before the call (torch._dynamo.mark_dynamic({arg}, {dynamic[0]})), "
                               "best inside the package, so that its workload and its users compile one graph")
        if here.get("requires_grad") != there.get("requires_grad"):
            return "requires_grad", (f"the workload calls {{name}} with {arg}.requires_grad={there.get('requires_grad')}; "
                                     f"this program used {here.get('requires_grad')} -- add that call to the workload")
    return "same", ("this call of {name} compiled fresh although the workload makes one like it: the code, torch "
                    "config or environment differ from the build's (hatch-precompile verify tells)")


def signature(sig: Any) -> str:
    """``images f32[64, 1, 28, 28] (grad on)`` from a recorded signature."""
    inputs = sig["inputs"] if isinstance(sig, dict) else sig.inputs
    grad = sig["grad_mode"] if isinstance(sig, dict) else sig.grad_mode
    if inputs is None:
        return "(inputs not recorded)"
    args = ", ".join(
        f"{a['name']} {_DTYPES.get(a.get('dtype'), a.get('dtype'))}{a.get('shape')}"
        + (" requires_grad" if a.get("requires_grad") else "")
        for a in inputs
    )
    mode = "" if grad is None else (" (grad on)" if grad else " (no_grad)")
    return (args or "no tensor inputs") + mode


_DTYPES = {"torch.float32": "f32", "torch.float64": "f64", "torch.float16": "f16", "torch.bfloat16": "bf16",
           "torch.int64": "i64", "torch.int32": "i32", "torch.bool": "b8"}


# -- rendering -------------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    graphs, parcels = report["graphs"], report["distributions"]
    fresh = sum(not g["from_cache"] for g in graphs)
    out = [
        f"snoop: {' '.join(report['command'])} exited {report['exit_code']}; {len(graphs)} graph(s) "
        f"at or above {report['tmin']:g} s, {fresh} compiled fresh",
        "graphs, largest compile time first:",
    ]
    for g in graphs:
        source = ("from its artifacts" if g["from_shipped"] else "from a cache") if g["from_cache"] else "compiled fresh"
        kind = " (backward)" if g["kind"] == "backward" else ""
        out.append(f"  {g['seconds']:8.2f} s  {g['function']} at {g['location']} [{g['compile_id']}]{kind}  "
                   f"{g['distribution']}  {source}")
    out.append("distributions:")
    for name, p in parcels.items():
        line = (f"  {name}: {p['graphs']} graph(s), {p['compiled_seconds']:.2f} s compiled fresh, "
                f"{p['cached_seconds']:.2f} s served from caches")
        if "coverage" in p:
            line += f"; coverage {p['coverage']:.0%} of its graphs served by its artifacts ({p['artifacts']})"
        out.append(line)
    if report.get("served"):
        out.append("compiled functions shipped as Dynamo cache entries (served: no trace, no compile):")
        for function, outcome in sorted(report["served"].items()):
            out.append(f"  {function}: {outcome}")
    if report.get("steps"):
        out.append("shipped steps, calls by route (aotinductor and precompiled: no compile; fallback: torch.compile):")
        for step in report["steps"]:
            out.append(f"  {step['package']}:{step['name']}: {step['calls']} call(s) by {step['route']}")
    if report["gaps"]:
        out.append("workload gaps (graphs of hatch-precompile packages compiled fresh):")
        for gap in report["gaps"]:
            out.append(f"  {gap['function']} at {gap['location']} [{gap['compile_id']}], {gap['seconds']:.2f} s:")
            out.append(f"    this program: {signature(gap['signature'])}")
            shipped = "; ".join(signature(s) for s in gap["shipped"]) or "nothing for this function"
            out.append(f"    shipped:      {shipped}")
            out.append(f"    hint: {gap['hint']}")
            if gap.get("why"):
                out.append("    why it missed (torch's cache key against the shipped graph's):")
                out.extend(f"      {line}" for line in why.summary(gap["why"]))
    if report["pitfalls"]:
        out.append("pitfalls:")
        for item in report["pitfalls"]:
            out.append(f"  {item['kind']} at {item['location']}: {item['what']}")
            out.append(f"    fix: {item['fix']}")
    if report.get("trace"):  # last, where the eye lands: the page that shows all of it
        out.extend(report["trace"]["lines"])
    return "\n".join(out) + "\n"
