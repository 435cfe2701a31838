"""What the build's second pass records of each compile as its workloads run (builder/served/
dynamo_pass.py): the guards torch drops from each guarded code and where the trace made them, what
the trace read (dynamo_reads.py), the options of each ``torch.compile`` the package made, and each
a library made that the package's code ran; every compile of a function kept in its one entry."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import sys
import types
from typing import Any

from hatch_precompile.builder.served import dynamo_packaging, dynamo_reads, guard_sites, optimizer_steps
from hatch_precompile.protocol import dynamo_sources, served_compiles
from hatch_precompile.run.served import dependency_compiles
from hatch_precompile.run.torch_internals import patching
from hatch_precompile.run.torch_internals.registry import lookup

_BYPASS = "Detected a package bypass:"  # torch's warning where it cannot package a compile
_SAME_GUARDS = ("another compile of it saved the same guards, and held other objects (an optimizer of another "
                "class): a new process cannot tell which of the two a call is for")


def entry_code_key(code: Any) -> tuple[str | None, str]:
    """The qualified name and source key of one code of torch's entry (its ``python_code``), as a
    compile's own code is keyed here; (None, "") where the entry is of another shape."""
    python = getattr(code, "python_code", None)
    qualname = getattr(python, "co_qualname", None) or getattr(python, "co_name", None)
    if not isinstance(qualname, str):
        return None, ""
    return qualname, served_compiles.source_key(qualname, getattr(python, "co_firstlineno", 0))


class Recorder:
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
        self.optimizers = optimizer_steps.OptimizerSteps()
        self.options: dict[str, list[dict[str, Any] | None]] = {}  # source key -> each package call's keywords
        # (None: not plain data, such as a backend given as a function)
        self.modules: dict[str, tuple[str, str]] = {}  # source key -> (module, qualname)
        # source key -> each library call that compiled it (where it was made, its keywords), and
        # those a frame of the package's code ran: compiled on the package's behalf
        self.library_calls: dict[str, list[tuple[dict[str, Any], dict[str, Any] | None]]] = {}
        self.run_by_package: set[str] = set()
        self.compiles: dict[str, dict[int, Any]] = {}  # source key -> each compile's latest entry, by its first code
        self.bypassed: dict[str, str] = {}  # source key -> why torch could not save a compile's guards ("": unsaid)
        self.failed: dict[str, str] = {}  # source key -> what torch raised while it compiled a frame of it
        self._bypass_reason = ""  # torch's, logged while it builds the guards of the compile under way
        # each compile's first code (by id, the object kept) -> the class of the module whose method it compiled
        self.classes: dict[int, tuple[Any, str]] = {}

    def install(self, torch: Any) -> None:
        patching.wrap("guard-filter", before=self._filter)
        patching.wrap("guarded-code", before=self._guarded_code)
        patching.wrap("code-source", instead=dynamo_packaging.property_accessor)
        patching.wrap("guard-pickler", instead=dynamo_packaging.decorated_function)
        patching.wrap("guard-pickler", instead=dynamo_packaging.local_class)
        patching.wrap("guard-pickler", instead=dynamo_packaging.marked_tensor)
        patching.wrap("local-type-guard", instead=dynamo_packaging.local_type_kept)
        patching.wrap("module-global", after=dynamo_packaging.module_as_import)
        patching.wrap("dynamo-entries", after=self._every_compile)
        patching.wrap("package-bypass", after=self._bypassed)
        patching.wrap("frame-error", on_error=self._frame_failed)
        self.reads.install()
        self.optimizers.install()
        point = lookup("dropped-guards", "logging")
        logging.getLogger(point.module).addFilter(self._dropped_log)
        logging.getLogger(lookup("bypass-log", "logging").module).addFilter(self._bypass_log)
        lookup("compile-calls", "wrap")
        original = torch.compile

        def compile(model: Any = None, **options: Any) -> Any:
            made_in = sys._getframe(1)
            caller = served_compiles.caller(made_in)  # model.compile(): its caller's
            at = served_compiles.site(caller)
            # a library's module.compile() while the package's code runs is the package's (served_compile.py)
            own = caller is not made_in and dependency_compiles.running(self.package)()
            if model is None:  # the decorator: its caller's call
                return lambda fn: self._call(fn, options, at, original)
            return self._call(model, options, at, original, own)

        torch.compile = compile

    def _call(self, model: Any, options: dict[str, Any], at: dict[str, Any], original: Any, own: bool = False) -> Any:
        """``original(model, **options)``, its options recorded where the package made the call (or
        ``own``); a library's call (``at``), and whether the package's code runs what it returned."""
        ours = own or at["module"] == self.package or at["module"].startswith((self.package + ".", "hatch_precompile."))
        found = served_compiles.function_key(model)
        plain = dict(options) if served_compiles.options_key(options) is not None else None
        if found is None:
            return original(model, **options)
        key, module, qualname, _ = found
        from hatch_precompile.run.torch_internals.served import compile_scope

        if ours:
            if plain not in self.options.setdefault(key, []):
                self.options[key].append(plain)
            self.modules[key] = (module, qualname)
            compiled = original(model, **options)
            compile_scope.mark(compiled, key)  # a frame that fails under it is this function's (_frame_failed)
            self._class_of_compile(compiled, model)
            return compiled
        compiled = original(model, **options)
        self._class_of_compile(compiled, model)
        self.library_calls.setdefault(key, []).append((at, plain))
        self.modules.setdefault(key, (module, qualname))
        compile_scope.mark(compiled, key)

        package_running = dependency_compiles.running(self.package)

        def ran() -> None:
            if package_running():
                self.run_by_package.add(key)

        compile_scope.each_call(compiled, ran)
        return compiled

    def _class_of_compile(self, compiled: Any, model: Any) -> None:
        """The class of the module whose method ``compiled`` compiles (``module.compile()`` compiles
        torch's ``Module._call_impl``, one code for every class), kept by the compile's first code."""
        from hatch_precompile.run.torch_internals.served import compile_scope

        owner = getattr(served_compiles.innermost(model), "__self__", None)
        first = compile_scope.first_code_of(compiled) if owner is not None else None
        if first is not None:
            self.classes[id(first)] = (first, served_compiles.class_name(owner))

    def parts(self, key: str, saved: Any) -> dict[str, Any]:
        """``saved`` (the function's entry as torch saved it, torch's ``PrecompileCacheEntry``) split by
        the class of the module each compile compiled, where they are of two classes or more: a
        process that compiles one class installs (and imports the sources of) that class's compiles
        only. Empty where there is nothing to split, or a compile's class is not known."""
        compiles = self.compiles.get(key, {})
        labels = {found: self.classes.get(found, (None, None))[1] for found in compiles}
        if len(set(labels.values())) < 2 or None in labels.values():
            return {}
        by_class: dict[str, list[Any]] = {}
        for found, entry in compiles.items():
            by_class.setdefault(str(labels[found]), []).append(entry)
        return {label: split_entry(saved, entries) for label, entries in sorted(by_class.items())}

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

    def _frame_failed(self, arguments: dict[str, Any], exc: Exception) -> Any:
        """A frame whose compile raised in this pass (the first pass compiled it: what raised is this
        pass's own, torch's guard creation for saving, say) runs eagerly, as torch runs a frame under
        ``suppress_errors``, and the function whose compile it ran under is not served, with torch's
        words; the pass goes on for the others. An exception torch never suppresses goes on."""
        frame = arguments.get("frame")
        code = getattr(frame, "f_code", None)
        if not isinstance(code, types.CodeType) or type(exc).__name__ == "ResumePrologueTracingError":
            return patching.PASS
        from hatch_precompile.run.torch_internals.served import compile_scope

        lookup("frame-error", "wrap")
        from torch._dynamo.convert_frame import ConvertFrameReturn  # noqa: TID251  (the build's child)

        answer = ConvertFrameReturn()  # torch's own answer for a suppressed error: the frame runs as it is
        self.optimizers.taken()  # what its trace made is no guarded code's
        key = compile_scope.innermost() or served_compiles.source_key(code.co_qualname, code.co_firstlineno)
        said = str(exc).strip().splitlines()
        self.failed.setdefault(key, f"torch failed to compile {code.co_qualname} "
                                    f"({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}) for saving: "
                                    f"{type(exc).__module__}.{type(exc).__qualname__}: {said[0] if said else ''}")
        return answer

    def _guarded_code(self, arguments: dict[str, Any]) -> None:
        # A frame torch bypassed after its trace (a graph holding parameters: a compiled optimizer's step)
        # still reaches here, its guards saved nowhere: its reason is kept for the build's note on the function.
        frame = getattr(arguments.get("self"), "_current_entry", None)
        if self._bypass_reason and getattr(frame, "bypassed", False):
            qualname, key = entry_code_key(frame)
            if qualname is not None:
                self.bypassed.setdefault(key, self._bypass_reason)
            self._bypass_reason = ""
        inits, reason = self.optimizers.taken()  # the optimizer state its trace made
        state = arguments.get("guards_state")
        if not isinstance(state, bytes) or not state:  # empty: a bypassed compile's (_bypassed)
            return None
        kept: list[dict[str, Any]] = []
        reason = reason or (None if self.filtered else "its guards were not seen while it compiled")
        optimizers = [value for _, guard_type, _, value, has_value in self.entries
                      if has_value and guard_type == "ID_MATCH" and dynamo_sources.is_optimizer(value)]
        named: set[tuple[str, str]] = set()
        memo: dict[str, Any] = {}  # source -> its object, for the guards deepcopy's memo made
        for (source, guard_type, derived, value, has_value), stack in zip(self.entries, self.stacks):
            if not {guard_type, *derived} & {*dynamo_sources.DROPPED, *dynamo_sources.HELD_TOO}:
                continue
            named.add((guard_type, source))
            if guard_type == "WEAKREF_ALIVE" and any(value is held for held in optimizers):
                continue  # Dynamo's weak reference to an optimizer it holds (by class: run/served/held_objects.py)
            found = dynamo_sources.dropped_guard(source, guard_type, derived, value, has_value, guard_sites.made_at(stack))
            if isinstance(found, str) and has_value and guard_sites.made_by_memo(source, guard_type, derived, stack):
                memo.setdefault(source, value)
            elif isinstance(found, str):
                reason = reason or found  # one the memo made that is also made elsewhere: said here
            else:
                if found["described"].get("kind") == dynamo_sources.OPTIMIZER and source in inits:
                    found["init"] = inits.pop(source)
                kept.append(found)
        if inits and reason is None:  # a state a first call would not have before its guards
            reason = f"its trace made the state of an optimizer it does not hold by class ({sorted(inits)[0]})"
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
        recorded = {"held": kept, **record} if reason is None and isinstance(record, dict) else str(reason)
        self.guarded[sha] = one_record(self.guarded.get(sha), recorded)
        self.lines[sha] = lines
        return None


def one_record(before: dict[str, Any] | str | None, recorded: dict[str, Any] | str) -> dict[str, Any] | str:
    """The index's one record of the guards two compiles saved as the same bytes (the index keys a
    guarded code by them): where they held other objects (an optimizer of another class), or the
    first could not be served, neither is."""
    if isinstance(before, str):
        return before
    if isinstance(before, dict) and isinstance(recorded, dict) and before["held"] != recorded["held"]:
        return _SAME_GUARDS
    return recorded


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
            renamed = next((c for c in codes if c.install_to_global and _same_code(c, code, names=False)), None)
            if same is None and renamed is not None:  # one resume function made by two compiles: torch keys
                # an entry's codes by their code, so two would install one name; one installs both
                renamed.function_names += [n for n in code.function_names if n not in renamed.function_names]
                continue
            if same is None:
                codes.append(_copied(code))
                continue
            same.guarded_codes += code.guarded_codes
            same.backend_ids += [b for b in code.backend_ids if b not in same.backend_ids]
            same.import_sources.update(code.import_sources)
            same.bypassed = same.bypassed or code.bypassed  # a compile torch would not save: none of it is
    return dataclasses.replace(first, codes=codes, source_info=dataclasses.replace(first.source_info,
                                                                                 inlined_sources=inlined))


def split_entry(saved: Any, entries: list[Any]) -> Any:
    """The part of ``saved`` (a function's whole entry as torch saved it) that ``entries`` (some of
    its compiles, as recorded) made: their codes, each with their guarded codes only, their backends
    and the sources they inlined."""
    mine = [code for entry in entries for code in entry.codes]
    states = {g.guards_state for code in mine for g in code.guarded_codes}
    backend_ids = {b for code in mine for b in code.backend_ids}
    codes = [dataclasses.replace(_copied(code), guarded_codes=[g for g in code.guarded_codes if g.guards_state in states],
                                 backend_ids=[b for b in code.backend_ids if b in backend_ids])
             for code in saved.dynamo.codes if any(_same_code(code, own) for own in mine)]
    inlined = set().union(*(entry.source_info.inlined_sources for entry in entries))
    dynamo = dataclasses.replace(saved.dynamo, codes=codes,
                                 source_info=dataclasses.replace(saved.dynamo.source_info, inlined_sources=inlined))
    return dataclasses.replace(saved, dynamo=dynamo, backends={k: v for k, v in saved.backends.items() if k in backend_ids})


def _copied(code: Any) -> Any:
    return dataclasses.replace(code, guarded_codes=list(code.guarded_codes), backend_ids=list(code.backend_ids),
                               import_sources=dict(code.import_sources), function_names=list(code.function_names))


def _same_code(one: Any, other: Any, names: bool = True) -> bool:
    return ((one.python_module, one.code_source, one.install_to_global, one.python_code)
            == (other.python_module, other.code_source, other.install_to_global, other.python_code)
            and (not names or one.function_names == other.function_names))
