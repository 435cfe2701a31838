"""What each trace of the build's second pass read, recorded for its guarded code (builder/served/dynamo_pass.py
writes it into the index, protocol/served_compiles.py): everything a served call needs to be shown
the same in the user's process.

- **Its guards as torch will rebuild them**, in words, rebuilt from the state torch just serialized,
  at the moment it traced (run/torch_internals/served/guard_text.py). Torch rebuilds them at install from
  that state, reading again every value it holds by reference (a module's attribute: a config set
  from an environment variable); the install compares the two.
- **The compiler settings** it compiled under (run/torch_internals/served/compiler_settings.py).
- **What it read that no guard holds**: each dict key it looked up and did not find (torch's
  ``getitem_const_raise_exception_if_absent``: a subscript that raised ``KeyError``, as
  ``os.environ.get`` does for an unset variable), each module hook dict it found empty (torch's
  ``EMPTY_NN_MODULE_HOOKS_DICT``, which it does not build; the global hooks' dicts), and each call
  torch folded into the code (protocol/served_compiles.py's ``FOLDED_FACTS``). Where the fold hook
  cannot see torch's calls, every such fact is recorded, as if each had been folded.
"""

from __future__ import annotations

from typing import Any

from hatch_precompile.protocol import served_compiles
from hatch_precompile.run.torch_internals import module_state, patching
from hatch_precompile.run.torch_internals.served import compiler_settings, dynamo_cache, folded_calls

_EMPTY_HOOKS = "EMPTY_NN_MODULE_HOOKS_DICT"


class TraceReads:
    """The reads of the trace under way, taken by each guarded code as torch adds it."""

    def __init__(self) -> None:
        self.pending: list[dict[str, Any] | str] = []  # reads since the last guarded code (or why one cannot be checked)
        self.settings: dict[str, dict[str, Any]] = {}  # every snapshot a guarded code compiled under, by digest
        self.rebuilding = False  # while a guarded code's guards are rebuilt here (the guard filter is torch's own)
        self._facts: dict[int, str] = {}

    def install(self) -> None:
        patching.wrap("dict-absent-key", before=self._absent)
        patching.wrap("folded-call", before=self._folded, after=self._folded_to)

    def _absent(self, arguments: dict[str, Any]) -> None:
        if "self" not in arguments or "arg" not in arguments:  # torch's signature moved: nothing can be told
            self.pending.append("a dict key its trace looked up could not be read (torch moved)")
            return
        dictionary, key, tx = arguments["self"], arguments["arg"], arguments.get("tx")
        source = getattr(dictionary, "source", None)
        if source is None or dictionary.maybe_getitem_const(key) is not None:
            return  # a dict the trace made, or a key it found (torch guards that one)
        if tx is not None and tx.output.side_effects.is_modified(dictionary):
            return  # the trace's own change of the dict, not a read of the process
        try:
            found = key.as_python_constant()
        except Exception:
            self.pending.append(f"the trace looked up a key it could not name in {_name(source)}")
            return
        self.pending.append(served_compiles.absent(_name(source), found))

    def _folded(self, arguments: dict[str, Any]) -> None:
        call = self._fact_names().get(id(getattr(arguments.get("self"), "value", None)))
        if call is None:
            return
        if arguments.get("args") or arguments.get("kwargs"):
            self.pending.append(f"torch folded {call}(...) with arguments, which no new process can check")
            return
        self.pending.append(served_compiles.fact(call, *folded_calls.answer(call)))

    def _folded_to(self, arguments: dict[str, Any], result: Any) -> None:
        """What torch folded is what this process's call answered (else the answer is no fact to check)."""
        call = self._fact_names().get(id(getattr(arguments.get("self"), "value", None)))
        if call is None or arguments.get("args") or arguments.get("kwargs"):
            return
        try:
            folded = repr(result.as_python_constant())
        except Exception:  # not a constant after all: nothing folded
            return
        recorded = next((r for r in reversed(self.pending) if isinstance(r, dict) and r.get("call") == call), None)
        if recorded is None or recorded.get("value") != folded:
            self.pending.append(f"torch folded {call}() to {folded}, which this process's call does not answer here")

    def _fact_names(self) -> dict[int, str]:
        if not self._facts:
            for call in served_compiles.FOLDED_FACTS:
                function = folded_calls.function(call)
                if function is not None:
                    self._facts[id(function)] = call
        return self._facts

    def taken(self, entries: list[tuple[str, str, tuple[str, ...], Any, bool]], state: bytes,
              compile_package: Any) -> tuple[dict[str, Any] | str, list[str] | None]:
        """The reads of the guarded code torch is adding (its guards' filter ``entries``, its
        serialized guards ``state``, the CompilePackage adding it), as the index records them, or why
        it cannot be served; and its guards in words, as torch rebuilds them now."""
        pending, self.pending = self.pending, []
        found = compiler_settings.snapshot()
        if found is None:
            return "the compiler settings it compiled under cannot be read", None
        digest, settings = found
        self.settings[digest] = settings
        reads: list[dict[str, Any] | str] = list(pending)
        for source, guard_type, _, value, has_value in entries:
            if guard_type == _EMPTY_HOOKS or (module_state.hook_kind(source.rpartition(".")[2]) and has_value
                                             and isinstance(value, dict) and not value):
                reads.append(served_compiles.empty(source))
        if not patching.wrapped("folded-call"):  # which calls torch folded is unknown: every one is checked
            reads += [served_compiles.fact(call, *folded_calls.answer(call)) for call in served_compiles.FOLDED_FACTS]
        if not patching.wrapped("dict-absent-key"):
            reads.append("which dict keys its trace found absent cannot be seen (torch moved)")
        lines = self._rebuilt(state, compile_package)
        why = next((r for r in reads if isinstance(r, str)), None)
        if why is not None:
            return why, lines
        unique = {repr(sorted(r.items())): r for r in reads if isinstance(r, dict)}
        return {"reads": list(unique.values()), "settings": digest}, lines

    def _rebuilt(self, state: bytes, compile_package: Any) -> list[str] | None:
        """The guards torch's install would rebuild from ``state``, now, in words; None where they
        cannot be rebuilt here (the guard filter is torch's own meanwhile: no compile's)."""
        self.rebuilding = True
        try:
            return dynamo_cache.rebuilt_guards(state, compile_package)
        finally:
            self.rebuilding = False


def _name(source: Any) -> str:
    name = source.name
    return name() if callable(name) else str(name)
