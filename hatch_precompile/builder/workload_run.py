"""Run the workloads in the build's child, per CPU capability, each run laid out as a set (``capture``).

No torch here: the child (child/build_child.py) imports it; this process starts it through
child/supervisor.py and shows its progress, and artifact_layout.py lays out what it left.
Backend-neutral, so that ``warm`` and ``bake`` run exactly what a build runs.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from hatch_precompile.builder import torch_trace
from hatch_precompile.builder.caches import lean_headers
from hatch_precompile.builder.reporter import PREFIX, Reporter
from hatch_precompile.builder.served import dynamo_pass, served_proof
from hatch_precompile.builder.sets import artifact_layout
from hatch_precompile.child import supervisor
from hatch_precompile.errors import CannotCompile, ChildError, Unusable, WorkloadFailed
from hatch_precompile.protocol import CACHE_DIR_VAR, DIRNAME, DYNAMO_DIR, SERVED_FILE, ChildResult, Manifest
from hatch_precompile.run import variables
from hatch_precompile.run.caches import relocate


def capture(
    *,
    root: Path | None,
    work_dir: Path,
    package: str,
    workloads: list[str],
    timeout: float,
    reporter: Reporter,
    python: str = sys.executable,
    environ: dict[str, str] | None = None,
    capabilities: tuple[str, ...] = (),
    device: str = "auto",
    cpu_target: str = "portable",
    heartbeat: float | None = None,
    trace: Path | None = None,
    dynamo_cache: bool = True,
    users_torch: bool = False,
) -> Path | None:
    """Run ``workloads`` and build ``work_dir/_precompiled``; return it, or None if nothing compiled.

    ``root`` is the project dir put first on the child's ``sys.path`` (None: the package is
    already importable, as for ``hatch-precompile warm``). ``python`` and ``environ`` are the
    child's interpreter and environment (another environment's, see target_environment.py). Each of
    ``capabilities`` (``ATEN_CPU_CAPABILITY`` values) gets a run and an artifact set of its own;
    none: one run as the machine is. ``device``, ``cpu_target`` and ``dynamo_cache`` are the options of those names;
    ``heartbeat``, the seconds between a long phase's lines (None: the variable's, or 30);
    ``trace``, the dir for torch's structured trace of the workloads (None:
    ``HATCH_PRECOMPILE_TORCH_TRACE``'s, if set), a subdir per capability when there are several.
    ``users_torch``: the child's torch is the user's own (a target environment's, or one built
    without isolation), not a throwaway build env's: the children keep the caller's temp dir, where
    torch keeps its C++ prefix header for that torch, so the next build on it builds none.
    In a GitHub Actions job each run's lines are a group of the log (reporter.py).
    Raises WorkloadFailed on a raising, crashing or timed-out workload, Unusable when this torch
    cannot make trustworthy artifacts (CannotCompile when this machine cannot build kernels).
    """
    target = work_dir / DIRNAME
    made = 0
    said: set[str] = set()  # what every run of the workloads says alike: once
    if trace is None and variables.torch_trace():
        trace = Path(str(variables.torch_trace())).absolute()
    runs = capabilities or (None,)
    for capability in runs:
        run_dir = work_dir / f"run-{capability or 'native'}"
        title = (f"artifact set for CPU capability {capability} (ATEN_CPU_CAPABILITY={capability})" if capability
                 else f"running {', '.join(workloads)}")
        env = dict(os.environ if environ is None else environ)
        if capability:
            env["ATEN_CPU_CAPABILITY"] = capability
        if device == "cpu":  # torch then sees no GPU, and neither does the environment key
            env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = ""
        traced = None if trace is None else trace / capability if capability and len(runs) > 1 else trace
        with reporter.group(title, said=capability is not None):
            manifest = _run_set(
                root, run_dir, target, package, workloads, (timeout, heartbeat), reporter, python, env,
                {"capability": capability, "device": device, "cpu_target": cpu_target,
                 "dynamo_cache": dynamo_cache}, said, traced, users_torch,
            )
        made += manifest is not None
    if not made:
        shutil.rmtree(target, ignore_errors=True)
        return None
    return target


def _run_set(
    root: Path | None, run_dir: Path, target: Path, package: str, workloads: list[str],
    limits: tuple[float, float | None], reporter: Reporter, python: str, env: dict[str, str], options: dict[str, Any],
    said: set[str], trace: Path | None, users_torch: bool,
) -> Manifest | None:
    """One run of the workloads, laid out as ``target/sets/<name>``; None if it made no set.
    ``options``: the run's ``capability``, ``device`` and ``cpu_target``; ``said``: the notes an
    earlier run gave already; ``trace``: where torch's structured trace goes, or None."""
    started = time.perf_counter()
    capability = options["capability"]
    cache_dir, out_dir = run_dir / "inductor-cache", run_dir / "out"
    for missing in reversed([d for d in (run_dir, *run_dir.parents) if not d.exists()]):
        missing.mkdir(mode=0o700)  # under umask 002 too: load() in the served proof trusts no group-writable parent
    cache_dir.mkdir()
    paths = [] if root is None else [str(root)] + ([str(root / "src")] if (root / "src").is_dir() else [])
    spec = {"workloads": workloads, "paths": paths, "package": package, **options}
    env = {**env, CACHE_DIR_VAR: str(cache_dir)}
    before = set(torch_trace.logs(trace)) if trace is not None and trace.is_dir() else set()
    try:
        child = _run_child(python, run_dir, spec, env if trace is None else torch_trace.environ(env, trace), limits,
                           reporter, users_torch)
    finally:  # a failed workload's trace is the one most worth reading
        if trace is not None:
            for line in torch_trace.render(trace, before, python).lines():
                reporter.info(line)
    if child.status == "cannot_compile":
        raise CannotCompile(f"this machine cannot build C++ kernels: {child.detail}")
    if child.status == "unusable":
        raise Unusable(child.detail)
    if child.status == "no_gpu":
        raise WorkloadFailed(", ".join(workloads), 'not run: `device = "cuda"` asks for a GPU', no_gpu=child.detail)
    if child.status == "skipped":
        reporter.warning(f"{child.detail}; no artifact set for {capability}")
        return None
    for note in child.data.get("never_saved") or []:
        if note not in said:
            said.add(note)
            reporter.info(note)
    result = {**child.data, "workloads": child.workloads}
    if options.get("dynamo_cache", True) and child.data.get("dynamo_pass") and not variables.no_dynamo_cache(env):
        unshipped = _served_compiles(python, run_dir, spec, env, limits, reporter, out_dir, users_torch, result)
        proven = _proven(python, run_dir, spec, env, limits, reporter, result, cache_dir, out_dir, users_torch,
                         unshipped)
        if proven is not None:
            result["served"] = proven
    return artifact_layout.lay_out(target, package, result, cache_dir=cache_dir, out_dir=out_dir,
                                   started=started, reporter=reporter)


def _proven(python: str, run_dir: Path, spec: dict[str, Any], env: dict[str, str], limits: tuple[float, float | None],
            reporter: Reporter, result: dict[str, Any], cache_dir: Path, out_dir: Path, users_torch: bool,
            unshipped: dict[str, str]) -> dict[str, Any] | None:
    """The served proof (builder/served/served_proof.py), run on generated modules with lean headers
    (builder/caches/lean_headers.py): where that proof serves less than every function the second pass
    shipped, the modules as torch wrote them are put back and proven instead."""
    leaned = lean_headers.apply(cache_dir, result.get("extern_kernels")) if (out_dir / SERVED_FILE).is_file() else {}
    if not leaned:
        return served_proof.prove(python, run_dir, spec, env, limits, reporter, result, cache_dir, out_dir,
                                  users_torch, unshipped)
    shipped = run_dir / "entries-before-proof"  # what the proof takes out of out_dir, for a second proof
    shutil.copytree(out_dir / DYNAMO_DIR, shipped)
    said: list[tuple[bool, str]] = []  # the proof's verdict, said once it is the one kept
    held = Reporter(lambda text: said.append((False, text)), lambda text: said.append((True, text)))
    proven = served_proof.prove(python, run_dir, spec, env, limits, reporter, result, cache_dir, out_dir,
                                users_torch, unshipped, verdict=held)
    if proven is not None and proven["proof"] == "ok" and set(proven["not_served"]) <= set(unshipped):
        for warning, text in said:
            (reporter.show_warning if warning else reporter.show)(text)
        reporter.info(f"{len(leaned)} generated module(s) import only what their code calls: "
                      "served, they load without Inductor's lowerings")
        return proven
    lean_headers.restore(leaned)
    shutil.rmtree(out_dir / DYNAMO_DIR, ignore_errors=True)
    shutil.move(shipped, out_dir / DYNAMO_DIR)
    shutil.rmtree(run_dir / "served-proof", ignore_errors=True)
    less = sorted(set(proven["not_served"]) - set(unshipped)) if proven is not None else []
    why = proven["proof"] if proven is not None and proven["proof"] != "ok" else f"not served: {', '.join(less)}"
    reporter.info(f"generated modules as torch wrote them: with lean headers the package served less ({why}); "
                  "proving it again")
    return served_proof.prove(python, run_dir, spec, env, limits, reporter, result, cache_dir, out_dir,
                              users_torch, unshipped)


def _served_compiles(python: str, run_dir: Path, spec: dict[str, Any], env: dict[str, str],
                     limits: tuple[float, float | None], reporter: Reporter, out_dir: Path,
                     users_torch: bool, built: dict[str, Any]) -> dict[str, str]:
    """The second pass (builder/served/dynamo_pass.py): the package's torch.compile calls as Dynamo cache entries,
    into ``out_dir/dynamo``, and the kernels it built into ``built`` (the first pass's result); each
    compiled function it did not ship, and why. Its failure costs the set nothing but those entries,
    said in one line."""
    started = time.perf_counter()
    work = run_dir / "dynamo-pass"
    first = Path(env[CACHE_DIR_VAR])
    copy = work / "inductor-cache"  # the first pass's graphs, hit; its entries left as users' traced calls find them
    shutil.copytree(first, copy, symlinks=True)
    timeout, heartbeat = limits
    job = supervisor.Job("hatch_precompile.builder.served.dynamo_pass", spec, f"{PREFIX} (second pass)", reporter.line,
                         relay=lambda line: reporter.line(f"  | {line}"),
                         timeout=timeout, heartbeat=variables.heartbeat() if heartbeat is None else heartbeat,
                         own_temp=not users_torch)
    env = {**env, CACHE_DIR_VAR: str(copy), dynamo_pass.CACHING_PRECOMPILE_VAR: "1"}
    try:
        result = supervisor.run(job, work, python, env)
    except ChildError as exc:
        reporter.warning(f"no compiled function is served untraced: the second pass under torch's caching_precompile "
                         f"stopped: {exc.detail}")
        return {}
    if result.status != "ok":
        why = result.detail or (result.failure.traceback.strip().splitlines()[-1] if result.failure else result.status)
        reporter.warning(f"no compiled function is served untraced: {why}")
        return {}
    made = work / "out" / DYNAMO_DIR
    if made.is_dir():
        shutil.move(str(made), str(out_dir / DYNAMO_DIR))
        _ship_generated_modules(copy, first)
        _ship_built_kernels(copy, first, result.data, built)
    data = result.data
    traced = (f"; {data['traced']} of their guarded codes are traced (a guard on an object no new process can tell "
              "from another, on an object's state, or reached by a path not evaluated)") if data.get("traced") else ""
    dependencies = f", {data['by_dependencies']} compiled by its dependencies" if data.get("by_dependencies") else ""
    reporter.info(f"{data.get('functions', 0)} compiled function(s) served without Dynamo tracing them "
                  f"({data.get('guarded', 0)} guarded code(s){dependencies}){traced}; second pass "
                  f"{time.perf_counter() - started:.1f} s")
    unshipped = {}
    for note in data.get("notes") or []:
        reporter.info(f"not served untraced: {note}")
        name, _, why = note.partition(": ")
        unshipped[name] = why
    return unshipped


def _ship_generated_modules(second: Path, first: Path) -> None:
    """The modules Inductor generated for the second pass's graphs that the first pass's cache lacks
    (torch numbers each compile in its module, so a graph compiled again is another file), shipped
    with the first's: a served process then finds each entry's module as shipped, lean header and
    all (builder/caches/lean_headers.py), where torch would write it from the entry as it generated it."""
    for module in second.glob("??/*.py"):
        shipped = first / module.relative_to(second)
        if not shipped.exists():
            shipped.parent.mkdir(exist_ok=True)
            shutil.copy2(module, shipped)


def _ship_built_kernels(second: Path, first: Path, made: dict[str, Any], built: dict[str, Any]) -> None:
    """The CPU kernels the second pass built that the first did not (``made``: its record of each
    one's command), copied into the first's cache dir and recorded with its kernels (``built``, the
    first pass's result): a served process finds them built, where it would otherwise build them at
    its first call. Only where every flag set the second pass compiled with is one the first pass's
    kernels used, so the set's CPU features still cover them; else they stay out, built where needed."""
    commands, first_flags = made.get("kernel_commands") or {}, {tuple(f) for f in built.get("flag_sets") or ()}
    flags = {tuple(f) for f in made.get("flag_sets") or ()}
    if not commands or not flags or not flags <= first_flags:  # no flags read: what they were cannot be told
        return
    for key, command in sorted(commands.items()):
        if key in built["kernel_commands"]:
            continue
        source = second / relocate.cache_relpath(key, "")
        for path in sorted(source.parent.glob(key + ".*")):
            target = first / path.relative_to(second)
            target.parent.mkdir(exist_ok=True)
            if not target.exists():
                shutil.copy2(path, target)
        built["kernel_commands"][key] = command


def _run_child(
    python: str, run_dir: Path, spec: dict[str, Any], env: dict[str, str], limits: tuple[float, float | None],
    reporter: Reporter, users_torch: bool,
) -> ChildResult:
    """The child's result; raises WorkloadFailed if it did not finish them all."""
    timeout, heartbeat = limits
    job = supervisor.Job("hatch_precompile.child.build_child", spec, PREFIX, reporter.line,
                         relay=lambda line: reporter.line(f"  | {line}"),
                         timeout=timeout, heartbeat=variables.heartbeat() if heartbeat is None else heartbeat,
                         own_temp=not users_torch)
    try:
        result = supervisor.run(job, run_dir, python, env)
    except ChildError as exc:
        detail = (f"{exc.detail} (the `timeout` option)" if exc.detail.startswith("timed out") else exc.detail)
        raise WorkloadFailed(exc.workload, detail) from None
    if result.status == "failed" and result.failure is not None:
        failure = result.failure
        raise WorkloadFailed(failure.workload, "\n" + failure.traceback, failure.missing_module, failure.no_gpu)
    return result
