"""``hatch-precompile verify``: do the artifacts still cover what the package compiles?

Runs the package's workloads in a fresh process with an empty Inductor cache dir, after
``load()`` (child/verify_child.py), and counts what did not come from the caches: AOTAutograd and FX graph
misses and bypasses, and new kernel binaries (each one a g++ run). Any miss fails: the Julia
``@warnpcfail`` for a package's CI, catching artifacts gone stale after a code change.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.child import supervisor
from hatch_precompile.errors import ChildError, VerifyError
from hatch_precompile.protocol import BUILDING_VAR, CACHE_DIR_VAR, PACKAGE_VAR, STEPS_VERIFY_VAR, TORCHSCRIPT_DIR_VAR
from hatch_precompile.run import variables
from hatch_precompile.tools import why as why_module

# `--setting`s: what a user's program may set before it calls the package, each a class of miss.
SETTING_FORMS = ("deterministic", "default-dtype=DTYPE", "matmul-precision=highest|high|medium",
                 "inductor.NAME=VALUE", "functorch.NAME=VALUE", "env.NAME=VALUE")
_MATMUL = ("highest", "high", "medium")


def parse_setting(text: str) -> dict[str, Any]:
    """``--setting`` text -> what the replay applies; ValueError naming the accepted forms."""
    name, eq, value = text.strip().partition("=")
    if name == "deterministic" and not eq:
        return {"deterministic": True}
    if name == "default-dtype" and re.fullmatch(r"[a-z0-9]+", value):
        return {"default_dtype": value}
    if name == "matmul-precision" and value in _MATMUL:
        return {"matmul_precision": value}
    module, dot, attr = name.partition(".")
    if module in ("inductor", "functorch") and dot and re.fullmatch(r"[A-Za-z_][\w.]*", attr) and eq:
        return {"config": [module, attr, value]}
    if module == "env" and dot and re.fullmatch(r"[A-Za-z_]\w*", attr) and eq:
        return {"env": [attr, value]}
    raise ValueError(f"--setting {text!r} is not one of: {', '.join(SETTING_FORMS)}")


def variants(threads: list[int], settings: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(label, setting) of each replay: as built first, then each thread count and setting alone."""
    out: list[tuple[str, dict[str, Any]]] = [("as built", {})]
    out += [(f"threads={n}", {"threads": n}) for n in threads]
    out += [(text, parse_setting(text)) for text in settings]
    return out


def run(package: str, workloads: list[str], timeout: float, say: Callable[[str], None],
        setting: dict[str, Any] | None = None, manifests: list[Any] | None = None, label: str = "as built"
        ) -> dict[str, Any]:
    """What the child measured (load(), workloads), plus ``misses``: one line per thing compiled here,
    with why torch's key differs from the shipped graph's where ``manifests`` recorded it.
    ``label`` names the replay (``--threads``, ``--setting``) in what it says and in its errors."""
    setting = setting or {}
    if setting:
        say(f"verify {package}: under {label}")
    try:
        return _run(package, workloads, timeout, say, setting, manifests)
    except VerifyError as exc:
        raise VerifyError(f"{label}: {exc}" if setting else str(exc)) from None


def as_json(package: str, results: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """verify's ``--json``: the first replay (as built) at the top, the others as variants."""
    (_, first), rest = results[0], results[1:]
    return {"package": package, "ok": not first["misses"] and not first["unknown"], **first, "variants": [
        {"setting": label, "ok": not r["misses"] and not r["unknown"], **r} for label, r in rest]}


def render_all(package: str, results: list[tuple[str, dict[str, Any]]]) -> str:
    (_, first), rest = results[0], results[1:]
    return render(package, first) + "".join(f"under {label}:\n" + render(package, r) for label, r in rest)


def _run(package: str, workloads: list[str], timeout: float, say: Callable[[str], None], setting: dict[str, Any],
         manifests: list[Any] | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-verify-") as tmp:
        work = Path(tmp)
        (work / "cache").mkdir()
        env, removed = variables.as_on_users_machines(os.environ)
        env = {k: v for k, v in env.items() if k not in (BUILDING_VAR, TORCHSCRIPT_DIR_VAR)}
        env[CACHE_DIR_VAR] = str(work / "cache")
        env[STEPS_VERIFY_VAR], env[PACKAGE_VAR] = "1", package  # save_step() runs the shipped step
        if "env" in setting:
            env[setting["env"][0]] = setting["env"][1]
        if removed:  # the build ran without them too: verify asks what users' machines get
            say(f"verify {package}: the workloads run without {', '.join(removed)}, as on users' machines")
        say(f"verify {package}: load(), then {len(workloads)} workload(s) in a fresh process "
            "with an empty Inductor cache dir")
        # The workloads' own output goes to stderr, so that stdout stays the report (--json).
        job = supervisor.Job("hatch_precompile.child.verify_child",
                         {"package": package, "workloads": workloads, "setting": setting}, "verify",
                         say, relay=lambda line: print(line, file=sys.stderr, flush=True), timeout=timeout,
                         own_temp=False)  # the user's torch: its prefix header stays for the next run
        try:
            child = supervisor.run(job, work, env=env)
        except ChildError as exc:
            if exc.detail.startswith("timed out"):
                raise VerifyError(f"the workloads did not finish within {timeout:g} s (--timeout)") from None
            raise VerifyError(f"the verify process stopped: {exc.detail}") from None
    if child.status == "failed" and child.failure is not None:
        raise VerifyError(f"{child.failure.workload} failed:\n{child.failure.traceback}")
    result = {**child.data, "workloads": child.workloads}
    if child.status != "ok" or "load" not in result:
        raise VerifyError(f"the verify process reported {child.status}: {child.detail}")
    result["explanations"] = []  # the same reasons as data: {workload, compile_id, function, why}
    result["misses"] = misses(package, result, manifests or [], result["explanations"])
    if not setting:  # as built: an entry the replay could not use is one a user cannot either
        result["misses"] += [f"compiled function {function} was shipped as a Dynamo cache entry, and {outcome}"
                             for function, outcome in sorted((result.get("served") or {}).items())
                             if outcome.startswith("traced")]
    result["unknown"] = unknown(result)
    return result


def unknown(result: dict[str, Any]) -> list[str]:
    """Workloads for which torch gave no evidence either way: verify passes only on evidence. A
    workload that traced nothing, where shipped Dynamo cache entries were served, has its evidence:
    nothing was looked up because nothing was compiled."""
    served = any(outcome.startswith("served") for outcome in (result.get("served") or {}).values())
    return [
        f"{w['name']}: torch reported no AOTAutograd cache counters "
        "(torch._dynamo.utils.counters['aot_autograd'] is empty or unreadable), so verify cannot tell "
        "whether the artifacts served it"
        for w in result["workloads"]
        if not w["counters"].get("aot_autograd") and not (served and not w["graphs"])
    ]


def misses(package: str, result: dict[str, Any], manifests: Sequence[Any] = (),
           explanations: list[dict[str, Any]] | None = None) -> list[str]:
    found: list[str] = []
    top = package.split(".", 1)[0]
    load = result["load"]
    if not load["loaded"]:
        found.append(f"load() installed nothing: {load['reason']}")
    explained: set[str] = set()
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
            explanation = None if g["kind"] == "backward" else why_module.explain_graph(
                g, w.get("keys") or [], manifests, top, w)
            if g["kind"] == "backward" and g["compile_id"] in explained:
                why = "compiled with its forward graph, for the reason given there"
            if explanation is not None:
                explained.add(g["compile_id"])
                if explanations is not None:
                    explanations.append({"workload": w["name"], "compile_id": g["compile_id"],
                                         "function": g["function"], "why": explanation})
                why = "torch's cache key differs from the shipped graph's:\n" + "\n".join(
                    f"      {line}" for line in why_module.summary(explanation))
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
    for step in result.get("steps") or []:
        found.extend(f"step {step['name']}: {problem}" for problem in step["problems"])
        if step["shipped"] and step["route"] == "fallback":
            found.append(f"step {step['name']} was shipped but ran torch.compile instead: {step['reason']}")
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
    for function, outcome in sorted((result.get("served") or {}).items()):
        out.append(f"  compiled function {function}: {outcome}")
    for step in result.get("steps") or []:
        how = (f"ran by its shipped route ({step['route']})" if step["route"] != "fallback" else
               f"ran torch.compile ({step['reason']})")
        same = "matches" if not step["problems"] else "DIFFERS from"
        out.append(f"  step {step['name']}: {how}; {same} the workload's function on changed weights and inputs")
    out.extend(f"CANNOT TELL: {line}" for line in result["unknown"])
    if not result["misses"] and result["unknown"]:
        out.append("UNKNOWN: without torch's cache counters verify has no evidence that the artifacts work")
    elif not result["misses"]:
        out.append(f"OK: everything the workloads compiled came from {package}'s precompiled caches")
    else:
        out.extend(f"MISS: {line}" for line in result["misses"])
        out.append(
            f"FAILED: {len(result['misses'])} miss(es); the artifacts do not cover this code or "
            f"environment: rebuild the wheel for this environment or run "
            f"`hatch-precompile warm {package}`"
        )
    return "\n".join(out) + "\n"
