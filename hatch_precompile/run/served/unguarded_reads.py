"""What a served guarded code's trace read that no guard of torch's holds, checked against this process
when that guarded code is first about to run: the moment a cold ``torch.compile`` here would have
traced the call, and read them.

A cold compile reads, while it traces: the compiler settings (Inductor's, AOTAutograd's, Dynamo's,
torch's precision flags); each dict key it looks up and does not find (``os.environ.get("X")`` with
``X`` unset: torch guards a key it finds, not one it misses); each module's hook dicts, which torch
does not guard (``skip_nnmodule_hook_guards``); and the answers of the calls torch folds into the
code (``torch.distributed.is_initialized()``). A later change of any of them leaves a cold compile's
code as it was traced, so each is checked once per guarded code, and the answer kept: where one
differs here from the build's trace, that guarded code never runs in this process, and the call is
traced as a cold compile would trace it (served() says which, and why).

Standard library at import; torch is the caller's.
"""

from __future__ import annotations

import types
from typing import Any, Callable

from hatch_precompile.protocol import dynamo_sources, served_compiles


def check(code: dict[str, Any], settings: dict[str, dict[str, Any]],
          scope: dict[str, Any]) -> Callable[[Any], str | None]:
    """For one guarded code's index record: a function of a call's locals that says why what its
    trace read is not what this process has (None: it is the same). ``settings``: the index's
    compiler settings by digest; ``scope``: the code's globals."""
    reads = [(read, _evaluator(read)) for read in code["reads"]]
    build_settings = settings[code["settings"]]

    def differs(frame_locals: Any) -> str | None:
        said = _settings_differ(code["settings"], build_settings)
        if said:
            return said
        for read, evaluate in reads:
            try:
                said = _read_differs(read, evaluate, scope, frame_locals)
            except Exception as exc:  # a name deleted, an attribute gone: not what the trace read
                said = f"{dynamo_sources.spoken(read.get('source') or read.get('call', '?'))} cannot be read here ({exc!r})"
            if said:
                return said
        return None

    return differs


def _settings_differ(digest: str, build: dict[str, Any]) -> str | None:
    from hatch_precompile.run.torch_internals.served import compiler_settings

    found = compiler_settings.snapshot()
    if found is None:
        return "this process's compiler settings cannot be read"
    here_digest, here = found
    if here_digest == digest:
        return None
    said = compiler_settings.differences(build, here)
    return said[0] if said else "this process's compiler settings are not the build's"


def _read_differs(read: dict[str, Any], evaluate: Callable[[dict[str, Any], Any], Any] | None,
                  scope: dict[str, Any], frame_locals: Any) -> str | None:
    if read["kind"] == "fact":
        return _fact_differs(read)
    assert evaluate is not None
    found = evaluate(scope, frame_locals)
    source = read["source"]
    if read["kind"] == "absent":
        key = served_compiles.key_of(read)
        if key not in found:
            return None
        if source.endswith("environ._data") and isinstance(key, bytes):
            return (f"os.environ[{key.decode(errors='replace')!r}] is set here; the build's trace read it unset "
                    "(torch does not guard a variable it does not find)")
        return f"{dynamo_sources.spoken(source)}[{key!r}] is there here; the build's trace did not find it"
    if not found:
        return None
    from hatch_precompile.run.torch_internals import module_state

    owner, _, name = dynamo_sources.spoken(source).rpartition(".")
    kind = module_state.hook_kind(name) or "hook"
    where = "every module" if kind.startswith("global") else owner
    return (f"{len(found)} {kind}(s) on {where} here, where the build's trace ran with none "
            "(torch does not guard hooks)")


def _fact_differs(read: dict[str, Any]) -> str | None:
    from hatch_precompile.run.torch_internals.served import folded_calls

    here, raised = folded_calls.answer(read["call"])
    if (here, raised) == (read.get("value"), read.get("raised")):
        return None
    built = read.get("value") if read.get("raised") is None else f"its {read['raised']}"
    return (f"{read['call']}() {'is ' + str(here) if raised is None else 'raises ' + raised} here; the build's "
            f"trace folded {built} into the code")


def _evaluator(read: dict[str, Any]) -> Callable[[dict[str, Any], Any], Any] | None:
    if read["kind"] == "fact":
        return None
    compiled = dynamo_sources.evaluator(read["source"])
    if compiled is None:  # parse() refused such an index: never reached
        raise ValueError(f"{read['source']} is not a source this version evaluates")
    code: types.CodeType = compiled[0]

    def evaluate(scope: dict[str, Any], frame_locals: Any) -> Any:
        return eval(code, {**dynamo_sources.SOURCE_HELPERS, "__builtins__": {}, "G": scope, "L": frame_locals})

    return evaluate
