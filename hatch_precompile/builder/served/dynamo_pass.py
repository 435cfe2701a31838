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

import dataclasses
import hashlib
import json
import logging
import os
import pickle
import sys
import time
import types
from pathlib import Path
from typing import Any

from hatch_precompile.builder.caches import empty_graphs
from hatch_precompile.builder.served import dynamo_packaging, dynamo_reads, graph_saving, guard_sites
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
    dynamo_sources,
    served_compiles,
)
from hatch_precompile.run.torch_internals import patching
from hatch_precompile.run.torch_internals.registry import lookup
from hatch_precompile.run.torch_internals.served import guard_text

CACHING_PRECOMPILE_VAR = "TORCH_CACHING_PRECOMPILE"  # torch's: read when torch._dynamo.config is imported
_BYPASS = "Detected a package bypass:"  # torch's warning where it cannot package a compile


class _Recorder:
    """What the workloads' compiles leave for the index: dropped guards by guarded code, calls by function."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.entries: list[tuple[str, str, tuple[str, ...], Any, bool]] = []  # the last guard filter's
        self.stacks: list[Any] = []  # each one's user stack: where it was made (a guard made twice is two)
        self.filtered = False  # whether the guard filter saw the last compile's guards
        self.logged: set[tuple[str, str]] = set()  # the guards torch said it dropped, since that filter
        self.guarded: dict[str, dict[str, Any] | str] = {}  # sha256 of a guarded code's guards -> index value
        self.lines: dict[str, list[str] | None] = {}  # sha256 of a guarded code's guards -> them in words
        self.reads = dynamo_reads.TraceReads()
        self.options: dict[str, list[dict[str, Any] | None]] = {}  # source key -> each package call's keywords
        # (None: not plain data, such as a backend given as a function)
        self.modules: dict[str, tuple[str, str]] = {}  # source key -> (module, qualname)
        self.compiles: dict[str, dict[int, Any]] = {}  # source key -> each compile's latest entry, by its first code
        self.bypassed: dict[str, str] = {}  # source key -> why torch could not save a compile's guards ("": unsaid)
        self._bypass_reason = ""  # torch's, logged while it builds the guards of the compile under way

    def install(self, torch: Any) -> None:
        patching.wrap("guard-filter", before=self._filter)
        patching.wrap("guarded-code", before=self._guarded_code)
        patching.wrap("code-source", instead=dynamo_packaging.property_accessor)
        patching.wrap("guard-pickler", instead=dynamo_packaging.decorated_function)
        patching.wrap("module-global", after=dynamo_packaging.module_as_import)
        patching.wrap("dynamo-entries", after=self._every_compile)
        patching.wrap("package-bypass", after=self._bypassed)
        self.reads.install()
        point = lookup("dropped-guards", "logging")
        logging.getLogger(point.module).addFilter(self._dropped_log)
        logging.getLogger(lookup("bypass-log", "logging").module).addFilter(self._bypass_log)
        lookup("compile-calls", "wrap")
        original = torch.compile

        def compile(model: Any = None, **options: Any) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__") or ""
            if model is None:  # the decorator: its caller's call
                return lambda fn: self._call(fn, options, caller, original)
            return self._call(model, options, caller, original)

        torch.compile = compile

    def _call(self, model: Any, options: dict[str, Any], caller: str, original: Any) -> Any:
        """``original(model, **options)``, its options recorded where the package made the call."""
        ours = caller == self.package or caller.startswith((self.package + ".", "hatch_precompile."))
        found = served_compiles.function_key(model)
        if ours and found is not None:
            key, module, qualname, _ = found
            plain = dict(options) if served_compiles.options_key(options) is not None else None
            if plain not in self.options.setdefault(key, []):
                self.options[key].append(plain)
            self.modules[key] = (module, qualname)
        return original(model, **options)

    def _every_compile(self, arguments: dict[str, Any], _: Any) -> None:
        """Torch records one entry per function, each ``torch.compile`` of it replacing the last one's
        (two model sizes, a module in train() then in eval()); a compile re-records its own entry as
        it grows. Kept by compile (its first code entry stays the same object), and recorded merged."""
        entry, key = arguments.get("cache_entry"), arguments.get("key")
        codes = getattr(entry, "codes", None)
        if not codes or not isinstance(key, str):
            return
        compiles = self.compiles.setdefault(key, {})
        compiles[id(codes[0])] = entry
        if len(compiles) > 1:
            lookup("dynamo-entries", "wrap")
            from torch._dynamo.precompile_context import PrecompileContext  # noqa: TID251

            PrecompileContext._dynamo_cache_entries[key] = merged_entry(list(compiles.values()))

    def _filter(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.reads.rebuilding:  # a guarded code's guards rebuilt as an install would: not a compile's
            return {}
        inner = arguments.get("guard_filter_fn")
        self.logged, self.filtered = set(), False

        def recording(entries: Any) -> Any:
            self.filtered = True
            self.entries = [(e.orig_guard.name, e.guard_type, tuple(e.derived_guard_types or ()),
                             e.value if e.has_value else None, bool(e.has_value)) for e in entries]
            self.stacks = [getattr(e.orig_guard, "user_stack", None) for e in entries]
            kept = list(inner(entries)) if inner is not None else [True] * len(entries)
            # held as torch's own drops are (_guarded_code): kept, torch would fail to save the guards
            return [keep and not {e.guard_type, *(e.derived_guard_types or ())} & set(dynamo_sources.HELD_TOO)
                    for keep, e in zip(kept, entries)]

        return {"guard_filter_fn": recording}

    def _dropped_log(self, record: logging.LogRecord) -> bool:
        if "dropped with caching_precompile" in str(record.msg) and isinstance(record.args, tuple) and len(record.args) >= 2:
            self.logged.add((str(record.args[0]), str(record.args[1])))
            return False  # one line per guard of every compile: the index says it once
        return True

    def _bypass_log(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(_BYPASS):
            self._bypass_reason = message[len(_BYPASS):].strip()
            return False  # the build's line on the function says it
        return True

    def _bypassed(self, arguments: dict[str, Any], _: Any) -> None:
        """Where torch cannot save a compile's guards (a ``PackageError``: an object it cannot pickle,
        such as a local function's ``lru_cache``), it marks the function's entry bypassed, leaves the
        guards' state None, and then fails the compile on that (convert_frame's check that the state
        is set), and with it the whole pass. A bypassed entry takes no guarded code (torch's
        ``add_guarded_code`` returns), so an empty state lets that compile finish as any other: the
        function is not served, the others still are."""
        manager, graph, code = arguments.get("self"), arguments.get("output_graph"), arguments.get("f_code")
        if manager is None or not arguments.get("save_guards") or getattr(manager, "guards_state", b"") is not None:
            return
        if graph is None or getattr(graph, "package", True) is not None:  # not torch's bypass: its check stands
            return
        manager.guards_state = b""
        if isinstance(code, types.CodeType):
            key = served_compiles.source_key(code.co_qualname, code.co_firstlineno)
            self.bypassed.setdefault(key, self._bypass_reason)
        self._bypass_reason = ""

    def _guarded_code(self, arguments: dict[str, Any]) -> None:
        state = arguments.get("guards_state")
        if not isinstance(state, bytes) or not state:  # empty: a bypassed compile's (_bypassed)
            return None
        kept: list[dict[str, Any]] = []
        reason = None if self.filtered else "its guards were not seen while it compiled"
        named: set[tuple[str, str]] = set()
        memo: dict[str, Any] = {}  # source -> its object, for the guards deepcopy's memo made
        for (source, guard_type, derived, value, has_value), stack in zip(self.entries, self.stacks):
            if not {guard_type, *derived} & {*dynamo_sources.DROPPED, *dynamo_sources.HELD_TOO}:
                continue
            named.add((guard_type, source))
            found = dynamo_sources.dropped_guard(source, guard_type, derived, value, has_value, guard_sites.made_at(stack))
            if isinstance(found, str) and has_value and guard_sites.made_by_memo(source, guard_type, derived, stack):
                memo.setdefault(source, value)
            elif isinstance(found, str):
                reason = reason or found  # one the memo made that is also made elsewhere: said here
            else:
                kept.append(found)
        reason = reason or guard_sites.ids_kept(memo, arguments.get("dynamo_code"))
        kept += guard_sites.grouped(memo)
        unknown = sorted(self.logged - named)
        if unknown and reason is None:  # torch dropped a guard this version does not know it drops
            reason = f"{unknown[0][0]} guard on {unknown[0][1]} (dropped by torch, unknown to this hatch-precompile)"
        record, lines = self.reads.taken(self.entries, state, arguments.get("self"))
        sha = hashlib.sha256(state).hexdigest()
        if isinstance(record, str):
            reason = reason or record
        elif lines is None:
            reason = reason or "its guards, as torch rebuilds them, could not be read when it was traced"
        self.guarded[sha] = {"held": kept, **record} if reason is None and isinstance(record, dict) else str(reason)
        self.lines[sha] = lines
        return None


def merged_entry(entries: list[Any]) -> Any:
    """One Dynamo cache entry holding every guarded code of ``entries`` (each a compile of the same
    function): a code they share (the function's own, one found by the same path) holds the guarded
    codes, backends and imports of each; a code of one compile only (a resume function) is added.
    Compiles for different devices are not merged: the last one is kept, as torch keeps it."""
    first, *rest = entries
    if any(entry.device_type != first.device_type for entry in rest):
        return entries[-1]
    codes = [_copied(code) for code in first.codes]
    inlined = set(first.source_info.inlined_sources)
    for entry in rest:
        inlined |= set(entry.source_info.inlined_sources)
        for code in entry.codes:
            same = next((c for c in codes if _same_code(c, code)), None)
            if same is None:
                codes.append(_copied(code))
                continue
            same.guarded_codes += code.guarded_codes
            same.backend_ids += [b for b in code.backend_ids if b not in same.backend_ids]
            same.import_sources.update(code.import_sources)
            same.bypassed = same.bypassed or code.bypassed  # a compile torch would not save: none of it is
    return dataclasses.replace(first, codes=codes, source_info=dataclasses.replace(first.source_info,
                                                                                 inlined_sources=inlined))


def _copied(code: Any) -> Any:
    return dataclasses.replace(code, guarded_codes=list(code.guarded_codes), backend_ids=list(code.backend_ids),
                               import_sources=dict(code.import_sources), function_names=list(code.function_names))


def _same_code(one: Any, other: Any) -> bool:
    return ((one.python_module, one.code_source, one.install_to_global, one.function_names, one.python_code)
            == (other.python_module, other.code_source, other.install_to_global, other.function_names,
                other.python_code))


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
    recorder = _Recorder(package)
    recorder.install(torch)
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


def _index(recorder: _Recorder, entries: Path, out: Path,
           no_graph: str) -> tuple[dict[str, served_compiles.Function], list[str]]:
    """Each entry of a function the package compiled, copied to ``out``, and its index record; and
    what was left out, and why (``no_graph``: why an entry holds no graph, as far as the pass heard)."""
    functions: dict[str, served_compiles.Function] = {}
    notes: list[str] = []
    for key in sorted(recorder.options):
        module, qualname = recorder.modules[key]
        path = entries / key / "entry"
        options = recorder.options[key]
        if not path.is_file():
            notes.append(f"{module}.{qualname}: torch saved no Dynamo cache entry for it (nothing compiled?)")
            continue
        if None in options:
            notes.append(f"{module}.{qualname}: compiled with options that are not plain data (a backend function?)")
            continue
        if len(options) > 1:  # its entry would hold graphs of either, and a call could run the other's
            notes.append(f"{module}.{qualname}: compiled with {len(options)} sets of options "
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
            notes.append(f"{module}.{qualname}: its Dynamo cache entry does not read back ({exc!r})")
            continue
        if made_for[0] != module or made_for[1] != qualname or served_compiles.source_key(qualname, made_for[2]) != key:
            notes.append(f"{module}.{qualname}: its Dynamo cache entry is another function's ({made_for[0]}.{made_for[1]})")
            continue
        if key in recorder.bypassed and not served:
            why = recorder.bypassed[key]
            notes.append(f"{module}.{qualname}: torch could not save its guards" + (f" ({why})" if why else ""))
            continue
        if not guarded:  # torch's "Backend not found" when it saved the entry (builder/served/graph_saving.py)
            notes.append(f"{module}.{qualname}: {no_graph}")
            continue
        found = {sha: recorder.guarded.get(sha, "its guards were not recorded while the workload ran")
                 for sha in sorted(guarded)}
        if all(isinstance(why, str) for why in found.values()):  # installing it would load graphs no call runs
            notes.append(f"{module}.{qualname}: every guarded code it compiled would be traced, so its entry is not "
                         f"shipped: {next(iter(found.values()))}")
            continue
        (out / f"{key}.entry").parent.mkdir(parents=True, exist_ok=True)
        (out / f"{key}.entry").write_bytes(data)
        lines = {sha: recorder.lines[sha] for sha, code in found.items() if isinstance(code, dict)}
        (out / f"{key}.guards").write_bytes(guard_text.packed(lines))  # type: ignore[arg-type]
        functions[key] = served_compiles.Function(
            module, qualname, int(made_for[2]), f"{DYNAMO_DIR}/{key}.entry", f"{DYNAMO_DIR}/{key}.guards",
            tuple(o for o in options if o is not None), found)
    return functions, notes


if __name__ == "__main__":
    sys.exit(main(sys.argv))
