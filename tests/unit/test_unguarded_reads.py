"""What a served guarded code's trace read that no guard holds, in-process: recorded as the build's
second pass records it (builder/served/dynamo_reads.py), checked as a user's process checks it at the code's
first run (run/served/unguarded_reads.py), and said in a user's words; the guards in words compared at
install (run/torch_internals/served/guard_text.py); the compile a call runs under (compile_scope)."""

from __future__ import annotations

import os
import types

import pytest
import torch

from hatch_precompile.builder.served import dynamo_reads
from hatch_precompile.protocol import dynamo_sources, served_compiles
from hatch_precompile.run.served import unguarded_reads
from hatch_precompile.run.torch_internals.served import compile_scope, compiler_settings, guard_text


@pytest.mark.parametrize("source, said", [
    ("L['self']._modules['a']._forward_hooks", "self.a._forward_hooks"),
    ("L['self']._modules['h']._modules['0']._backward_hooks", "self.h[0]._backward_hooks"),
    ("G['__import_torch_dot_nn_dot_modules_dot_module']._global_forward_hooks",
     "torch.nn.modules.module._global_forward_hooks"),
    ("G['os'].environ._data[b'HOME']", "os.environ['HOME']"),
    ("G['config'].SCALE", "config.SCALE"),
])
def test_a_source_is_said_in_a_users_words(source, said):
    assert dynamo_sources.spoken(source) == said


def _check(reads, settings=None, scope=None, frame_locals=None):
    here = compiler_settings.snapshot()
    assert here is not None
    digest, values = here if settings is None else (compiler_settings.digest(settings), settings)
    code = {"held": [], "reads": reads, "settings": digest}
    return unguarded_reads.check(code, {digest: values}, scope if scope is not None else {"os": os})(frame_locals or {})


def test_an_environment_variable_the_trace_found_unset_must_be_unset_here(monkeypatch):
    read = served_compiles.absent("G['os'].environ._data", b"HATCH_PRECOMPILE_TEST_FACTOR")
    monkeypatch.delenv("HATCH_PRECOMPILE_TEST_FACTOR", raising=False)
    assert _check([read]) is None
    monkeypatch.setenv("HATCH_PRECOMPILE_TEST_FACTOR", "3")
    assert _check([read]) == ("os.environ['HATCH_PRECOMPILE_TEST_FACTOR'] is set here; the build's trace read it "
                              "unset (torch does not guard a variable it does not find)")
    table = {"a": 1}  # any dict: its key, as the trace looked it up
    assert _check([served_compiles.absent("G['table']", "b")], scope={"table": table}) is None
    table["b"] = 2
    assert _check([served_compiles.absent("G['table']", "b")], scope={"table": table}) == \
        "table['b'] is there here; the build's trace did not find it"


def test_a_hook_dict_the_trace_found_empty_must_be_empty_here():
    block = torch.nn.Sequential(torch.nn.Linear(2, 2))
    read = served_compiles.empty("L['self']._modules['0']._forward_hooks")
    assert _check([read], frame_locals={"self": block}) is None
    block[0].register_forward_hook(lambda module, inputs, output: output)
    assert _check([read], frame_locals={"self": block}) == (
        "1 forward hook(s) on self[0] here, where the build's trace ran with none (torch does not guard hooks)")
    global_hooks = served_compiles.empty("G['m']._global_forward_pre_hooks")
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda module, inputs: None)
    try:
        said = _check([global_hooks], scope={"m": torch.nn.modules.module})
    finally:
        handle.remove()
    assert said.startswith("1 global forward pre-hook(s) on every module here")
    assert "cannot be read here (KeyError('self'))" in _check([read], frame_locals={})  # not what the trace read


def test_a_call_torch_folded_must_answer_the_same_here():
    fact = served_compiles.fact("torch.distributed.is_initialized", "False", None)
    assert _check([fact]) is None
    other = served_compiles.fact("torch.distributed.is_initialized", "True", None)
    assert _check([other]) == ("torch.distributed.is_initialized() is False here; the build's trace folded True "
                               "into the code")
    raised = served_compiles.fact("torch.distributed.get_world_size", None, "ValueError")
    assert _check([raised]) is None  # no process group: it raises here as it did at build


def test_the_compiler_settings_must_be_the_builds_each_difference_named():
    here = compiler_settings.snapshot()
    assert here is not None and compiler_settings.snapshot() is here  # by the configs' own hashes: not read again
    with torch._inductor.config.patch(fallback_random=not torch._inductor.config.fallback_random):
        changed = compiler_settings.snapshot()
        assert changed[0] != here[0]
        said = compiler_settings.differences(here[1], changed[1])
        assert said == [f"torch._inductor.config.fallback_random is {changed[1]['inductor']['fallback_random']!r} "
                        f"here, {here[1]['inductor']['fallback_random']!r} when the build compiled"]
        assert _check([], settings=here[1]) == said[0]
    with torch._dynamo.config.patch(cache_size_limit=99, suppress_errors=True):  # how often torch compiles
        assert compiler_settings.snapshot()[0] == here[0]
    specialize = torch._dynamo.config.specialize_float
    with torch._dynamo.config.patch(specialize_float=not specialize):
        assert compiler_settings.differences(here[1], compiler_settings.snapshot()[1]) == [
            f"torch._dynamo.config.specialize_float is {not specialize!r} here, {specialize!r} when the build compiled"]
    assert compiler_settings.snapshot() == here


def test_settings_are_plain_data_the_same_in_every_process():
    functions = {print, len}
    assert compiler_settings._plain(functions) == compiler_settings._plain({len, print})  # a set, in order
    assert compiler_settings._plain(object()) == "<object object at 0x?>"
    assert compiler_settings._plain(torch.float32) == "torch.float32"


def test_the_guards_in_words_differ_where_a_value_does_not_where_an_address_does():
    build = ["RootGuardManager", "| +- EQUALS_MATCH: G['config'].SCALE == 1.0      # return x * config.SCALE  # m.py:3 in f",
             '| +- GLOBAL_STATE: ___check_global_state() against {"num_threads":2}']
    here = [build[0], build[1].replace("== 1.0", "== 2.0"), build[2]]
    assert guard_text.difference(build, here, any_threads=True) == (
        "a guard holds `EQUALS_MATCH: G['config'].SCALE == 2.0` here where the build's trace held "
        "`EQUALS_MATCH: G['config'].SCALE == 1.0`")
    threads = [*build[:2], build[2].replace('"num_threads":2', '"num_threads":8')]
    assert guard_text.difference(build, threads, any_threads=True) is None  # the kernels read it when they run
    assert guard_text.difference(build, threads, any_threads=False).startswith("a guard holds `GLOBAL_STATE")
    assert guard_text.difference(build, build[:2], any_threads=False) == (
        "a guard of the build has no match: `GLOBAL_STATE: ___check_global_state() against {\"num_threads\":2}`")
    assert guard_text.unpacked(guard_text.packed({"a": build})) == {"a": build}
    with pytest.raises(ValueError):
        guard_text.unpacked(b"not zlib")

    class Manager:
        def __str__(self):
            return ("TREE_GUARD_MANAGER:\n+- RootGuardManager\n| +- TYPE_MATCH: ___check_type_id(L['x'], 9412345), "
                    "type=<class 'int'>\n| +- LAMBDA_GUARD: f(<function g at 0x7f00deadbeef>)")

    assert guard_text.lines(Manager())[2:] == ["| +- TYPE_MATCH: ___check_type_id(L['x'], <id>), type=<class 'int'>",
                                                "| +- LAMBDA_GUARD: f(<function g at 0x?>)"]
    assert guard_text.lines(object()) is None  # not the tree torch prints


def test_a_served_entry_runs_only_under_the_packages_own_compile_of_it():
    def fn(x):
        return x + 1

    ours, theirs = torch.compile(fn), torch.compile(fn, backend="eager")
    serving = compile_scope.serving("key")
    assert compile_scope.mark(ours, "key") and compile_scope.mark(ours, "key")  # marked once
    (enter,) = [hook for hook in compile_scope._context_of(ours).enter_exit_hooks if hasattr(hook, "_hatch_precompile_key")]
    assert not serving()
    done = enter()
    assert serving()
    done()
    assert not serving() and compile_scope._context_of(theirs) is not compile_scope._context_of(ours)
    assert not any(hasattr(h, "_hatch_precompile_key") for h in compile_scope._context_of(theirs).enter_exit_hooks)
    module = torch.compile(torch.nn.Linear(2, 2))
    assert compile_scope.mark(module, "module") and compile_scope._context_of(module) is module.dynamo_ctx
    assert not compile_scope.mark(lambda x: x, "key")  # no compile context behind it: not served


class _Dict:  # torch's ConstDictVariable, as the absent-key hook reads it
    def __init__(self, source, items):
        self.source, self.items = source, items

    def maybe_getitem_const(self, key):
        return self.items.get(key.as_python_constant())


class _Constant:
    def __init__(self, value):
        self.value = value

    def as_python_constant(self):
        return self.value


def test_the_build_records_each_key_its_trace_did_not_find_and_each_call_torch_folded():
    reads = dynamo_reads.TraceReads()
    source = types.SimpleNamespace(name=lambda: "G['os'].environ._data")
    reads._absent({"self": _Dict(source, {b"HOME": 1}), "arg": _Constant(b"HOME"), "tx": None})  # found: torch guards it
    reads._absent({"self": _Dict(None, {}), "arg": _Constant(b"X"), "tx": None})  # a dict the trace made
    reads._absent({"self": _Dict(source, {}), "arg": _Constant(b"X"), "tx": None})
    assert reads.pending == [served_compiles.absent("G['os'].environ._data", b"X")]
    reads._absent({"self": _Dict(source, {}), "args": (None, _Constant(b"X"))})  # torch's signature moved
    assert reads.pending[-1] == "a dict key its trace looked up could not be read (torch moved)"
    reads.pending.clear()
    import torch.distributed as dist

    folding = {"self": types.SimpleNamespace(value=dist.is_initialized), "args": [], "kwargs": {}}
    reads._folded(folding)
    reads._folded_to(folding, _Constant(False))
    assert reads.pending == [served_compiles.fact("torch.distributed.is_initialized", "False", None)]
    reads._folded_to(folding, _Constant(True))  # torch folded another answer than this process's call gives
    assert reads.pending[-1] == ("torch folded torch.distributed.is_initialized() to True, which this process's "
                                 "call does not answer here")
    reads._folded({"self": types.SimpleNamespace(value=dist.get_world_size), "args": [object()], "kwargs": {}})
    assert "with arguments" in reads.pending[-1]
    reads._folded({"self": types.SimpleNamespace(value=torch.sin), "args": [], "kwargs": {}})  # not a fact
    assert len(reads.pending) == 3


def test_a_function_the_proof_did_not_serve_is_taken_out_of_the_index_and_its_files_out_of_the_set(tmp_path):
    from hatch_precompile.builder.served import served_proof
    from hatch_precompile.protocol import DYNAMO_DIR, SERVED_FILE

    def function(name, line):
        key = served_compiles.source_key(name, line)
        return key, served_compiles.Function("m", name, line, f"{DYNAMO_DIR}/{key}.entry", f"{DYNAMO_DIR}/{key}.guards",
                                             ({},), {"a" * 64: {"held": [], "reads": [], "settings": name}})

    functions = dict([function("kept", 3), function("refused", 7)])
    index = served_compiles.Index(0, {"kept": {"inductor": {}}, "refused": {"inductor": {"x": 1}}}, functions)
    (tmp_path / DYNAMO_DIR).mkdir()
    (tmp_path / SERVED_FILE).write_text(served_compiles.dumps(index))
    for f in functions.values():
        (tmp_path / f.entry).write_bytes(b"entry")
        (tmp_path / f.guards).write_bytes(b"guards")
    refused = served_compiles.source_key("refused", 7)
    served_proof._drop(tmp_path, index, {refused})
    kept = served_compiles.parse((tmp_path / SERVED_FILE).read_text())
    assert list(kept.functions) == [served_compiles.source_key("kept", 3)] and list(kept.settings) == ["kept"]
    assert sorted(p.name for p in (tmp_path / DYNAMO_DIR).iterdir()) == sorted(
        ["served.json", f"{served_compiles.source_key('kept', 3)}.entry", f"{served_compiles.source_key('kept', 3)}.guards"])
    served_proof._drop(tmp_path, kept, set(kept.functions))  # none left: no index, no dir
    assert not (tmp_path / DYNAMO_DIR).exists()
    assert served_proof.record_line({"functions": 2, "served": 1, "not_served": {"m.refused": "torch could not"}}) == \
        "served 1 of 2 compiled function(s) untraced; not: m.refused (torch could not)"
