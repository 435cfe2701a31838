"""Performance pitfalls in what a workload or program compiled, each with a one-line fix.

Lux's pitfalls page in torch terms, read from what child/observe.py records: float64 where the
model is float32 (spurious type promotion), graph breaks from ``.item()``, ``.tolist()``,
``print`` or data-dependent control flow (the scalar-indexing trap), and recompiles from changing
shapes, dtypes or Python scalars (type instabilities). Used by ``snoop`` and by the build's
``graph-breaks``/``recompiles`` options.
"""

from __future__ import annotations

from typing import Any

# (substring of torch's graph-break reason, what it is, the fix)
_BREAKS = (
    ("item()", "a tensor turned into a Python number (.item())",
     "keep the value a tensor (torch.where, tensor arithmetic), or set "
     "torch._dynamo.config.capture_scalar_outputs = True"),
    ("tolist", "a tensor turned into a Python list (.tolist())",
     "keep the values in a tensor, or move the conversion out of the compiled function"),
    ("`print`", "print() inside the compiled function", "remove the print, or move it out of the compiled function"),
    ("data-dependent", "Python control flow on a tensor's value",
     "use torch.where or torch.cond instead of a Python `if` on a tensor"),
    ("data dependent", "Python control flow on a tensor's value",
     "use torch.where or torch.cond instead of a Python `if` on a tensor"),
    ("generic_jump", "Python control flow on a tensor's value",
     "use torch.where or torch.cond instead of a Python `if` on a tensor"),
)
# (substring of a guard failure, what it is, the fix)
_RECOMPILES = (
    ("size mismatch", "an input's shape changed",
     "mark the changing dim dynamic (torch._dynamo.mark_dynamic(x, dim) before the call) or compile "
     "with dynamic=True; or add the other shape to the workload"),
    ("rank mismatch", "an input's number of dims changed",
     "call the compiled function with one rank, or add each rank's call to the workload"),
    ("stride mismatch", "an input's layout changed", "make the input contiguous (x.contiguous()) before the call"),
    ("dtype mismatch", "an input's dtype changed", "cast the inputs to one dtype before the call"),
    ("requires_grad mismatch", "an input's requires_grad changed",
     "call it with one requires_grad, or add both calls to the workload"),
    ("device mismatch", "an input moved to another device", "keep the inputs on one device"),
)
EXPECTED = ("grad_mode",)  # training and inference of one function: two graphs by design


def instability(reason: str) -> tuple[str, str] | None:
    """(what, fix) when a recompile's guard failure is a type instability, else None."""
    if any(word in reason for word in EXPECTED):
        return None
    for needle, what, fix in _RECOMPILES:
        if needle in reason:
            return what, fix
    if " == " in reason or "type(" in reason:  # a guarded Python value: L['lr'] == 0.1
        return ("a Python scalar or object the function is specialised on changed",
                "pass it as a tensor instead of a Python number, or mark it dynamic")
    return "a guard failed", "see torch._dynamo.utils.guard_failures for the guard"


def graph_break(reason: str) -> tuple[str, str]:
    """(what, fix) of one graph break."""
    text = reason.lower()
    for needle, what, fix in _BREAKS:
        if needle.lower() in text:
            return what, fix
    return "a graph break", "see torch._dynamo.explain(fn)(*args) for what Dynamo could not trace"


def of_workload(graph_breaks: list[dict[str, Any]], recompiles: list[dict[str, Any]]) -> dict[str, list[str]]:
    """One line per graph break and per unstable recompile, for the build's options."""
    lines: dict[str, list[str]] = {"graph-breaks": [], "recompiles": []}
    for item in graph_breaks:
        what, fix = graph_break(str(item.get("reason", "")))
        lines["graph-breaks"].append(f"{item.get('location')}: {what} ({item.get('reason')}); fix: {fix}")
    for item in recompiles:
        for reason in item.get("reasons", []):
            found = instability(str(reason))
            if found:
                lines["recompiles"].append(
                    f"{item.get('function')} ({item.get('location')}): {found[0]} ({reason}); fix: {found[1]}"
                )
    return lines


def find(result: dict[str, Any], graphs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pitfall a program showed: {kind, location, what, fix}."""
    found = []
    for item in result.get("float64") or []:
        found.append({
            "kind": "float64 in a compiled graph", "location": item["location"],
            "what": f"{item['nodes']} float64 op(s) in {item['function']}: {', '.join(item['ops'])}",
            "fix": "compute in float32: cast float64 tensors with .float() before the call (torch.tensor of "
                   "Python floats and NumPy arrays default to float64)",
        })
    for graph in graphs:
        for arg in graph.get("inputs") or []:
            if arg.get("dtype") == "torch.float64":
                found.append({
                    "kind": "float64 input", "location": graph["location"],
                    "what": f"{graph['function']} was called with {arg['name']} as float64 {arg.get('shape')}",
                    "fix": f"cast {arg['name']} to float32 (.float()) before the call; float64 spreads to every op it touches",
                })
    for item in result.get("graph_breaks") or []:
        what, fix = graph_break(str(item.get("reason", "")))
        found.append({"kind": "graph break", "location": item.get("location"),
                      "what": f"{what}: {item.get('reason')}", "fix": fix})
    for item in result.get("recompiles") or []:
        for reason in item.get("reasons", []):
            unstable = instability(str(reason))
            if unstable:
                found.append({"kind": "recompile", "location": item.get("location"),
                              "what": f"{item.get('function')}: {unstable[0]} ({reason.strip()})", "fix": unstable[1]})
    for graph in graphs:
        if graph.get("restart_seconds"):
            found.append({"kind": "restarted trace", "location": graph.get("location"), "what": restarted_trace_line(graph),
                          "fix": "remove the graph break that restarts it (its own pitfall says where and how), or "
                                 "move it out of the compiled code: each restart is a second trace of the frame"})
    return found


def restarted_trace_line(graph: dict[str, Any]) -> str:
    """One line: the seconds a frame's tracing was thrown away, and why Dynamo restarted it."""
    reasons = "; ".join(str(r).strip() for r in graph.get("restart_reasons") or []) or "reason not recorded"
    return (f"{graph.get('function')}: {graph['restart_seconds']:.2f} s of Dynamo tracing thrown away by a restart, "
            f"at every start, warm ones too ({reasons})")
