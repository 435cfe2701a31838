"""The build's second pass: the workloads again, under torch's ``caching_precompile``, for the Dynamo
cache entries of the package's own ``torch.compile`` calls (served untraced: run/served/served_compile.py).

Started by workload_run.py (``supervisor.command(python, __name__, SPEC)``) after the first pass
(child/build_child.py), in a fresh process (a ``torch.compile`` wrapper made at the package's import
only records an entry where the flag was on when it was made), on a copy of the first pass's cache
dir: every graph the first pass compiled is found there, so nothing is compiled again, and the first
pass's entries (users' traced calls hit them) are left as they were. Steps and TorchScript modules
are not saved again.

While the workloads run, it records, for each guarded code torch serializes, which guards torch
dropped (it cannot pickle an object's identity) and what the object each held to is, where a new
process can tell it from any other (protocol/served_compiles.py), and the options and callers of
each ``torch.compile`` call. Writes ``dynamo/<key>.entry`` and ``dynamo/served.json`` into the
spec's ``out`` dir, for the functions the package compiled (its modules', or its steps' fallbacks).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

from hatch_precompile.builder.caches import empty_graphs
from hatch_precompile.builder.served import compile_recorder, graph_saving
from hatch_precompile.builder.sets import isa
from hatch_precompile.child import observe, progress, workload_loop
from hatch_precompile.protocol import (
    BUILDING_VAR,
    CACHE_DIR_VAR,
    DYNAMIC_THREADS_VAR,
    DYNAMO_DIR,
    EXIT_OK,
    PACKAGE_VAR,
    SERVED_FILE,
    STEPS_DIR_VAR,
    TORCHSCRIPT_DIR_VAR,
    ChildResult,
    Failure,
    served_compiles,
)
from hatch_precompile.run.torch_internals.registry import lookup
from hatch_precompile.run.torch_internals.served import guard_text

CACHING_PRECOMPILE_VAR = "TORCH_CACHING_PRECOMPILE"  # torch's: read when torch._dynamo.config is imported


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    out = Path(spec["out"])
    sys.path[:0] = spec["paths"]
    package = spec.get("package") or ""
    os.environ[BUILDING_VAR] = "1"
    os.environ[PACKAGE_VAR] = package
    for saved_by_the_first_pass in (STEPS_DIR_VAR, TORCHSCRIPT_DIR_VAR):
        os.environ.pop(saved_by_the_first_pass, None)
    os.environ.setdefault(DYNAMIC_THREADS_VAR, "1")
    started = time.perf_counter()
    progress.phase("importing torch")
    import torch

    from hatch_precompile.run.caches import warm_shortcuts
    from hatch_precompile.run.torch_internals.served import dynamo_cache

    # A warm run of the first pass's cache, as a user's first process is: no prefix header built
    # for kernels already built (~6 s), no ISA probe compiled again.
    warm_shortcuts.install_shortcuts()

    unsupported = dynamo_cache.unsupported(torch) or _flag_problem()
    if unsupported:
        workload_loop.write_result(out, ChildResult("unusable", unsupported))
        return EXIT_OK
    recorder = compile_recorder.Recorder(package)
    recorder.install(torch)
    # What this pass builds that the first did not (the backward of a module compiled in train() whose
    # workload never ran it: torch lowers it for the entry) ships with the first's kernels (workload_run.py),
    # built with the same arch flags, each command recorded for relocation.
    kernel_commands = observe.record_kernel_commands()
    flags = isa.CompileFlags(portable=spec.get("cpu_target", "portable") == "portable")
    flags.install()
    saving = graph_saving.GraphSaving()
    saving.install()
    # As the first pass compiled them: a graph with no call is keyed and found in its cache (torch
    # 2.14's entry, bundled, takes nothing else: "expected OutputCode", and the whole pass failed).
    empty_graphs.EmptyGraphs().install()
    cache_dir = os.environ[CACHE_DIR_VAR]

    from torch._dynamo.utils import counters  # noqa: TID251  (the build's child reads torch's counters)

    def measure(name: str, run: Any) -> dict[str, Any]:  # what the relayed line says: graphs traced, none compiled
        began, before, (kernels, _) = time.perf_counter(), observe.snapshot(counters), observe.cache_usage(cache_dir)
        run()
        return {"name": name, "seconds": round(time.perf_counter() - began, 3),
                "counters": observe.delta(before, observe.snapshot(counters)),
                "kernels": observe.cache_usage(cache_dir)[0] - kernels}

    workloads, stop = workload_loop.run_workloads(spec["workloads"], measure)
    if isinstance(stop, Failure):
        workload_loop.write_result(out, ChildResult("failed", failure=stop, workloads=workloads))
        return EXIT_OK
    progress.phase("saving the Dynamo cache entries")
    lookup("megacache", "call")
    try:
        torch.compiler.save_cache_artifacts()  # writes each function's entry into the cache dir's dynamo/
    except Exception as exc:
        workload_loop.write_result(out, ChildResult("unusable", f"torch did not save its Dynamo cache entries: {exc!r}"))
        return EXIT_OK
    saving.settle()
    functions, notes = _index(recorder, Path(cache_dir) / DYNAMO_DIR, out / DYNAMO_DIR, saving.why())
    if functions:
        used = {c["settings"] for f in functions.values() for c in f.guarded.values() if isinstance(c, dict)}
        settings = {digest: recorder.reads.settings[digest] for digest in sorted(used)}
        (out / SERVED_FILE).write_text(served_compiles.dumps(served_compiles.Index(served_compiles.optimization(),
                                                                                   settings, functions)))
    workload_loop.write_result(out, ChildResult("ok", workloads=workloads, data={
        "functions": len(functions), "notes": notes, "seconds": round(time.perf_counter() - started, 3),
        "guarded": sum(len(f.guarded) for f in functions.values()),
        "traced": sum(isinstance(v, str) for f in functions.values() for v in f.guarded.values()),
        "by_dependencies": sum(f.made_by is not None for f in functions.values()),
        "kernel_commands": kernel_commands if flags.applied else {},
        "flag_sets": sorted(list(flag_set) for flag_set in flags.flag_sets),
    }))
    return EXIT_OK


def possible(torch: Any) -> bool:
    """Whether this torch has all that serving an entry takes: the flag, precompile entries on code,
    and Dynamo's cache entries with their guards read back one by one (torch 2.10 on; 2.8 and 2.9
    have some of it, older none). Where not, no second pass: nothing is shipped that load() would refuse."""
    from hatch_precompile.run.torch_internals.served import dynamo_cache

    try:
        from torch._dynamo import config, package  # noqa: TID251

        needed = ("CompilePackage", "PrecompileCacheEntry", "load_guards_state", "load_guard_manager")
        return (dynamo_cache.unsupported(torch) is None and hasattr(config, "caching_precompile")
                and all(hasattr(package, name) for name in needed))
    except Exception:
        return False


def _flag_problem() -> str | None:
    lookup("caching-precompile", "setting")
    from torch._dynamo import config  # noqa: TID251

    if not getattr(config, "caching_precompile", False):
        return f"torch's caching_precompile is not on ({CACHING_PRECOMPILE_VAR}=1 was not taken)"
    return None


def _index(recorder: compile_recorder.Recorder, entries: Path, out: Path,
           no_graph: str) -> tuple[dict[str, served_compiles.Function], list[str]]:
    """Each entry of a function the package compiled, copied to ``out``, and its index record; and
    what was left out, and why (``no_graph``: why an entry holds no graph, as far as the pass heard)."""
    functions: dict[str, served_compiles.Function] = {}
    notes: list[str] = []
    made_by = _made_by(recorder, notes)
    for key in sorted(set(recorder.options) | set(made_by)):
        module, qualname = recorder.modules[key]
        path = entries / key / "entry"
        options = recorder.options[key] if key in recorder.options else made_by[key][1]
        site = None if key in recorder.options else made_by[key][0]
        named = f"{module}.{qualname}" + (f", compiled by {served_compiles.site_name(site)}" if site else "")
        if key in recorder.failed:  # its frames ran eagerly in this pass: what its entry holds is not all it compiles
            notes.append(f"{named}: {recorder.failed[key]}")
            continue
        if not path.is_file():
            notes.append(f"{named}: torch saved no Dynamo cache entry for it (nothing compiled?)")
            continue
        if None in options:
            notes.append(f"{named}: compiled with options that are not plain data (a backend function?)")
            continue
        if len(options) > 1:  # its entry would hold graphs of either, and a call could run the other's
            notes.append(f"{named}: compiled with {len(options)} sets of options "
                         f"({'; '.join(served_compiles.options_key(o or {}) or '?' for o in options)}): a function is "
                         "served for one")
            continue
        data = path.read_bytes()
        try:
            entry = pickle.loads(data)
            codes = entry.dynamo.codes
            served = [code for code in codes if not getattr(code, "bypassed", False)]
            guarded = {hashlib.sha256(g.guards_state).hexdigest() for code in served for g in code.guarded_codes}
            made_for = (codes[0].python_module, entry.dynamo.fn_name, entry.dynamo.fn_first_lineno)
        except Exception as exc:
            notes.append(f"{named}: its Dynamo cache entry does not read back ({exc!r})")
            continue
        if made_for[0] != module or made_for[1] != qualname or served_compiles.source_key(qualname, made_for[2]) != key:
            notes.append(f"{named}: its Dynamo cache entry is another function's ({made_for[0]}.{made_for[1]})")
            continue
        if key in recorder.bypassed and not served:
            why = recorder.bypassed[key]
            notes.append(f"{named}: torch could not save its guards" + (f" ({why})" if why else ""))
            continue
        if not guarded:  # torch's "Backend not found" when it saved the entry (builder/served/graph_saving.py)
            backends = {o.get("backend", "inductor") for o in options if o is not None} - {"inductor"}
            notes.append(f"{named}: " + (f"torch saves only the Inductor backend's compiled graphs with a Dynamo cache "
                                         f"entry (AOTAutograd's cache), and it was compiled with backend="
                                         f"{sorted(backends)[0]!r}" if backends else no_graph))
            continue
        found = {sha: recorder.guarded.get(sha, "its guards were not recorded while the workload ran")
                 for sha in sorted(guarded)}
        if all(isinstance(why, str) for why in found.values()):  # installing it would load graphs no call runs
            notes.append(f"{named}: every guarded code it compiled would be traced, so its entry is not "
                         f"shipped: {next(iter(found.values()))}{_unsaved(recorder, codes)}")
            continue
        out.mkdir(parents=True, exist_ok=True)
        try:
            parts = {label: pickle.dumps(part) for label, part in recorder.parts(key, entry).items()}
        except Exception:  # torch's entry of another shape: one entry for every class, as torch saved it
            parts = {}
        files = {label: f"{key}.{hashlib.sha256(label.encode()).hexdigest()[:16]}.entry" for label in parts}
        for label, part in parts.items():
            (out / files[label]).write_bytes(part)
        if not parts:
            (out / f"{key}.entry").write_bytes(data)
        lines = {sha: recorder.lines[sha] for sha, code in found.items() if isinstance(code, dict)}
        (out / f"{key}.guards").write_bytes(guard_text.packed(lines))  # type: ignore[arg-type]
        named_parts = {label: f"{DYNAMO_DIR}/{file}" for label, file in files.items()}
        functions[key] = served_compiles.Function(
            module, qualname, int(made_for[2]), next(iter(named_parts.values()), f"{DYNAMO_DIR}/{key}.entry"),
            f"{DYNAMO_DIR}/{key}.guards", tuple(o for o in options if o is not None), found, made_by=site,
            parts=named_parts)
    return functions, notes


def _unsaved(recorder: compile_recorder.Recorder, codes: list[Any]) -> str:
    """The frames of an entry torch saved no guards for (bypassed: a compiled optimizer's step, whose
    graph holds the parameters themselves), with torch's reason, as the end of the build's note."""
    said = []
    for code in codes:
        if not getattr(code, "bypassed", False):
            continue
        qualname, key = compile_recorder.entry_code_key(code)
        why = recorder.bypassed.get(key, "")
        said.append((qualname or "?") + (f" ({why})" if why else ""))
    return f"; torch saved no guards for {', '.join(said)}" if said else ""


def _made_by(recorder: compile_recorder.Recorder,
             notes: list[str]) -> dict[str, tuple[dict[str, Any], list[dict[str, Any] | None]]]:
    """Each function a library compiled that the package's code ran (and the package did not compile
    itself): the one library call that made it, and that call's keywords. One made by two calls
    (another line, another library) is named in ``notes`` and left out: a user's process could make
    either."""
    found = {}
    for key in sorted(recorder.run_by_package - set(recorder.options)):
        calls = recorder.library_calls[key]
        sites = {(at["module"], at["function"]) for at, _ in calls}
        if len(sites) > 1:
            module, qualname = recorder.modules[key]
            notes.append(f"{module}.{qualname}: compiled by {len(sites)} library calls "
                         f"({'; '.join(f'{m}.{f}' for m, f in sorted(sites))}): a function is served for one")
            continue
        options: list[dict[str, Any] | None] = []
        for _, plain in calls:
            if plain not in options:
                options.append(plain)
        found[key] = (calls[0][0], options)
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv))
