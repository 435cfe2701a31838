"""The ways users write torch.compile, in-process: whose call a ``module.compile()`` is, a tensor's
marked dims kept in a guarded code's state, a function the build did not ship said by ``served()``,
a call traced all the same said with the guard that failed, one function's failure in the second
pass or the proof costing that function only (tests/integration/test_served_compiles.py runs each
in a real build and fresh processes)."""

from __future__ import annotations

import dataclasses
import pickle
import threading
import types

import pytest
import torch

from hatch_precompile.builder.served import compile_recorder, dynamo_packaging, dynamo_pass, served_proof
from hatch_precompile.errors import ServedError
from hatch_precompile.protocol import served_compiles
from hatch_precompile.run.served import entry_install, served_compile
from hatch_precompile.run.torch_internals import patching
from hatch_precompile.run.torch_internals.served import compile_controls, compile_scope, entry_pickle, guard_text

PACKAGE = __name__.rsplit(".", 1)[0]  # this test module's package: its code is "the package's"


@pytest.fixture
def routed(monkeypatch):
    """torch.compile wrapped as load() wraps it, with this test's package served: each call routed to
    the package, as (package, the library call that made it)."""
    monkeypatch.setattr(entry_install, "this_process", entry_install.ProcessState())
    entry_install.this_process.packages[PACKAGE] = None
    found: list[tuple[str, object]] = []
    monkeypatch.setattr(served_compile, "_served", lambda package, model, options, original_, at=None: found.append(
        (package, at)) or original_(model, **options))
    monkeypatch.setattr(torch, "compile", served_compile._compile_wrapper(lambda model=None, **options: model))
    return found


def test_a_modules_own_compile_is_the_call_of_whoever_called_it(routed):
    torch.nn.Linear(2, 2).compile()  # torch's Module.compile calls torch.compile: the call is this test's
    assert routed == [(PACKAGE, None)]
    library = types.ModuleType("a_library")
    exec("def compile_blocks(model):\n    model.compile()\n", library.__dict__)
    library.compile_blocks(torch.nn.Linear(2, 2))  # a library's, while the package's code runs: the package's
    assert routed[1] == (PACKAGE, None)
    worker = threading.Thread(target=library.compile_blocks, args=(torch.nn.Linear(2, 2),))
    worker.start()
    worker.join()  # the same library call with no frame of the package's: a library's, never the package's
    assert len(routed) == 2


def test_the_caller_of_a_compile_skips_torchs_module_compile_only():
    frame = types.SimpleNamespace(f_globals={"__name__": "mypkg.model"}, f_code=types.SimpleNamespace(
        co_qualname="make", co_name="make"), f_back=None)
    inner = types.SimpleNamespace(f_globals={"__name__": "torch.nn.modules.module"}, f_code=types.SimpleNamespace(
        co_qualname="Module.compile", co_name="compile"), f_back=frame)
    assert served_compiles.caller(inner) is frame and served_compiles.caller(frame) is frame
    other = types.SimpleNamespace(f_globals={"__name__": "torch.nn.modules.module"}, f_code=types.SimpleNamespace(
        co_qualname="Module.to", co_name="to"), f_back=frame)
    assert served_compiles.caller(other) is other


def _unpickle_tensor(shape):  # torch's reduction of a tensor, as far as the test needs it
    return torch.zeros(shape)


def test_a_tensors_marked_dims_are_kept_with_it_and_rebuilt_by_torchs_own_reduction():
    def torchs(self, obj):
        return _unpickle_tensor, (tuple(obj.shape),)

    class Pickler:
        def reducer_override(self, obj):  # what patching installs: torch's own as __wrapped__
            raise AssertionError("not called")

    Pickler.reducer_override.__wrapped__ = torchs
    marked = torch.ones(3, 2)
    torch._dynamo.mark_dynamic(marked, 0)
    reducer, arguments = dynamo_packaging.marked_tensor({"self": Pickler(), "obj": marked})
    assert reducer is entry_pickle.marked_tensor
    rebuilt = pickle.loads(pickle.dumps((reducer, arguments)))  # a reference a user's process finds by name
    tensor = rebuilt[0](*rebuilt[1])
    assert tensor.shape == (3, 2) and tensor._dynamo_dynamic_indices == {0}
    assert dynamo_packaging.marked_tensor({"self": Pickler(), "obj": torch.ones(3)}) is patching.PASS  # none marked
    odd = torch.ones(3)
    odd._dynamo_dynamic_indices = "not a set"
    assert dynamo_packaging.marked_tensor({"self": Pickler(), "obj": odd}) is patching.PASS  # torch's answer
    assert dynamo_packaging.marked_tensor({"self": Pickler(), "obj": 3}) is patching.PASS


def test_the_index_says_each_function_not_shipped_and_a_process_says_it_where_the_package_compiles_it(monkeypatch):
    key, module, qualname, line = served_compiles.function_key(test_the_caller_of_a_compile_skips_torchs_module_compile_only)
    index = served_compiles.Index(0, {}, {}, {f"{module}.{qualname}": "torch failed to compile it for saving: X"})
    read = served_compiles.parse(served_compiles.dumps(index))
    assert read.not_served == index.not_served and served_compiles.parse(
        served_compiles.dumps(served_compiles.Index(0, {}, {}))).not_served == {}
    with pytest.raises(ServedError, match="not_served"):
        served_compiles.parse(served_compiles.dumps(index).replace('"torch failed', '["torch failed').replace(
            ': X"', ': X"]'))
    monkeypatch.setattr(entry_install, "this_process", entry_install.ProcessState())
    entry_install.this_process.packages[PACKAGE] = entry_install.Package(None, read)
    assert served_compile._shipped(PACKAGE, test_the_caller_of_a_compile_skips_torchs_module_compile_only, {}, None) is None
    assert entry_install.outcomes() == {f"{module}.{qualname}": "traced: the build did not serve it untraced: "
                                        "torch failed to compile it for saving: X"}


class _Manager:
    def __init__(self, holds: bool, part: str = "", fails: bool = False) -> None:
        self.root = self
        self.holds, self.part, self.fails = holds, part, fails

    def check_verbose(self, frame_locals):
        if self.fails:
            raise TypeError("another shape")
        return types.SimpleNamespace(result=self.holds, verbose_code_parts=[self.part] if self.part else [])


def test_a_call_traced_all_the_same_is_said_with_the_first_guard_that_failed(monkeypatch):
    monkeypatch.setattr(entry_install, "this_process", entry_install.ProcessState())
    told: list[str] = []
    code = types.SimpleNamespace()
    gates = [compile_controls.Gate(code, (None,), lambda why: None, manager=_Manager(False, "L['x'].size()[0] == 8  # y"),
                                   traced=told.append),
             compile_controls.Gate(code, (None,), lambda why: None, manager=_Manager(True), traced=told.append)]
    compile_controls._tell_traced(gates, {})
    assert told == ["1 of its 2 shipped guarded code(s) failed a guard (L['x'].size()[0] == 8)"]
    compile_controls._tell_traced(gates[1:], {})  # every guard held: left to torch by a control, said already
    assert len(told) == 1
    compile_controls._tell_traced([compile_controls.Gate(code, (None,), lambda why: None, manager=_Manager(True, fails=True),
                                                         traced=told.append)], {})
    assert told[-1] == "1 of its 1 shipped guarded code(s) failed a guard (its guards cannot be asked why " \
                       "(TypeError('another shape')))"
    entry_install.said_of("pkg.f", "served: 1 guarded code(s)")
    for why in ("first", "second"):
        entry_install._traced_call("pkg.f", why)
    outcome = entry_install.outcomes()["pkg.f"]
    assert outcome == "served: 1 guarded code(s); 2 call(s) traced here: first" and entry_install.calls_traced(outcome)
    assert not entry_install.calls_traced("served: 1 guarded code(s)")


def test_a_set_a_guard_holds_is_compared_whatever_order_its_process_prints_it_in():
    class Printed:
        def __init__(self, text: str) -> None:
            self.text = text

        def __str__(self) -> str:
            return self.text

    build = guard_text.lines(Printed("RootGuardManager\n| +- EQUALS_MATCH: G['r'].names == {'query', 'key', 'scale'}"))
    here = guard_text.lines(Printed("RootGuardManager\n| +- EQUALS_MATCH: G['r'].names == {'scale', 'query', 'key'}"))
    assert build == here and guard_text.difference(build, here, any_threads=False) is None
    other = guard_text.lines(Printed("RootGuardManager\n| +- EQUALS_MATCH: G['r'].names == {'scale', 'query'}"))
    assert guard_text.difference(build, other, any_threads=False).startswith("a guard holds")
    kept = guard_text.lines(Printed("RootGuardManager\n| +- EQUALS_MATCH: G['d'] == {'b': 1, 'a': 2}"))
    assert kept[1].endswith("{'b': 1, 'a': 2}")  # a dict prints in its own order: left as printed


def test_a_frame_whose_compile_raises_in_the_second_pass_runs_eagerly_and_costs_its_function_only():
    recorder = compile_recorder.Recorder("unit")
    code = test_a_frame_whose_compile_raises_in_the_second_pass_runs_eagerly_and_costs_its_function_only.__code__
    answer = recorder._frame_failed({"frame": types.SimpleNamespace(f_code=code)}, RuntimeError("ambiguous\nmore"))
    from torch._dynamo.convert_frame import ConvertFrameReturn

    assert isinstance(answer, ConvertFrameReturn)
    (key, why), = recorder.failed.items()
    assert key == served_compiles.source_key(code.co_qualname, code.co_firstlineno)
    assert why == (f"torch failed to compile {code.co_qualname} (test_compile_styles.py:{code.co_firstlineno}) for "
                   "saving: builtins.RuntimeError: ambiguous")
    compiled = torch.compile(lambda t: t)  # a frame under a marked compile is that compile's function's
    assert compile_scope.mark(compiled, "k" * 64)
    context = compile_scope._context_of(compiled)
    enter = context.enter_exit_hooks[-1]  # the mark's, after torch's own
    leave = enter()
    try:
        recorder._frame_failed({"frame": types.SimpleNamespace(f_code=code)}, RuntimeError("again"))
    finally:
        leave()
    assert recorder.failed["k" * 64].endswith("builtins.RuntimeError: again")
    resume = type("ResumePrologueTracingError", (Exception,), {})()  # torch never suppresses it
    assert recorder._frame_failed({"frame": types.SimpleNamespace(f_code=code)}, resume) is patching.PASS
    assert recorder._frame_failed({}, RuntimeError("no frame")) is patching.PASS


def test_a_function_that_failed_in_the_second_pass_or_has_no_graph_of_its_backend_is_not_shipped(tmp_path):
    recorder = compile_recorder.Recorder("unit")
    for name, line in (("failed", 3), ("eagerish", 7)):
        key = served_compiles.source_key(name, line)
        code = types.SimpleNamespace(python_module="unit.m", guarded_codes=[], bypassed=False)
        entry = types.SimpleNamespace(dynamo=types.SimpleNamespace(codes=[code], fn_name=name, fn_first_lineno=line))
        (tmp_path / "cache" / key).mkdir(parents=True)
        (tmp_path / "cache" / key / "entry").write_bytes(pickle.dumps(entry))
        recorder.modules[key] = ("unit.m", name)
        recorder.options[key] = [{"backend": "aot_eager"}] if name == "eagerish" else [{}]
    recorder.failed[served_compiles.source_key("failed", 3)] = "torch failed to compile failed (m.py:3) for saving: X"
    functions, notes = dynamo_pass._index(recorder, tmp_path / "cache", tmp_path / "out", "no graph")
    assert functions == {}
    assert sorted(notes) == ["unit.m.eagerish: torch saves only the Inductor backend's compiled graphs with a Dynamo "
                             "cache entry (AOTAutograd's cache), and it was compiled with backend='aot_eager'",
                             "unit.m.failed: torch failed to compile failed (m.py:3) for saving: X"]


def test_a_replay_that_raised_names_the_shipped_functions_its_traceback_runs_through():
    def function(module: str, qualname: str) -> served_compiles.Function:
        return served_compiles.Function(module, qualname, 1, "e", "g", ({},), {})

    index = served_compiles.Index(0, {}, {"a": function("pkg.model", "Net.forward"), "b": function("pkg.model", "loss"),
                                          "c": function("pkg.other", "forward")})
    traceback = ('Traceback (most recent call last):\n  File "/site/pkg/precompile.py", line 9, in workload\n'
                 '  File "/site/pkg/model.py", line 20, in forward\n  File "/torch/nn/functional.py", line 3, in relu\n'
                 'RuntimeError: boom')
    assert served_proof._raised_in(index, traceback) == {"a"}
    assert served_proof._raised_in(index, "") == set()



def test_a_proof_whose_replay_raises_in_a_served_call_drops_that_function_and_proves_the_rest(tmp_path, monkeypatch):
    """The replay's traceback runs through ``pkg.model.loss``: that function is taken out, the set laid
    out again without it, and the replay run again, which serves the other; a replay whose traceback
    names no shipped function serves none (as before)."""
    from hatch_precompile.builder.reporter import Reporter
    from hatch_precompile.protocol import ChildResult, Failure

    def function(qualname: str) -> served_compiles.Function:
        return served_compiles.Function("pkg.model", qualname, 1, f"dynamo/{qualname}.entry",
                                        f"dynamo/{qualname}.guards", ({},), {"s" * 64: {"held": [], "reads": [],
                                                                                        "settings": "d"}})

    out = tmp_path / "out"
    (out / "dynamo").mkdir(parents=True)
    index = served_compiles.Index(0, {"d": {}}, {served_compiles.source_key(q, 1): function(q) for q in ("loss", "net")})
    for f in index.functions.values():
        (out / f.entry).write_bytes(b"entry")
        (out / f.guards).write_bytes(b"guards")
    (out / "dynamo" / "served.json").write_text(served_compiles.dumps(index))
    manifest = types.SimpleNamespace(steps={}, env={"torch": "x"})

    def lay_out(target, *args, **kwargs):
        target.mkdir(parents=True, exist_ok=True)
        (target / "laid").write_text(str(sorted(p.name for p in (out / "dynamo").iterdir())))
        return manifest

    raised = 'Traceback (most recent call last):\n  File "/s/pkg/model.py", line 4, in loss\nRuntimeError: boom'
    replays = [ChildResult("failed", failure=Failure("pkg.precompile:workload", raised)),
               ChildResult("ok", data={"served": {"pkg.model.net": "served: 1 guarded code(s)"}})]
    monkeypatch.setattr(served_proof.artifact_layout, "lay_out", lay_out)
    monkeypatch.setattr(served_proof.supervisor, "run", lambda job, work, python, env: replays.pop(0))
    said: list[str] = []
    reporter = Reporter(said.append, said.append)
    record = served_proof.prove("python", tmp_path, {"package": "pkg"}, {}, (60.0, None), reporter, {}, tmp_path / "c",
                                out, False, {})
    assert record["proof"] == "ok" and record["served"] == 1 and record["functions"] == 2, record
    assert record["not_served"] == {"pkg.model.loss": "served in a fresh process, a call of it raised "
                                                      "(RuntimeError: boom)"}
    shipped = served_compiles.parse((out / "dynamo" / "served.json").read_text())
    assert [f.qualname for f in shipped.functions.values()] == ["net"] and "pkg.model.loss" in shipped.not_served
    assert not (out / "dynamo" / "loss.entry").exists() and (out / "dynamo" / "net.entry").exists()
    assert "precompile: warning: not served untraced: pkg.model.loss: served in a fresh process, a call of it raised " \
           "(RuntimeError: boom)" in said, said  # the build names it
    replays[:] = [ChildResult("failed", failure=Failure("w", "Traceback:\nRuntimeError: elsewhere"))]
    (tmp_path / "again").mkdir()
    record = served_proof.prove("python", tmp_path / "again", {"package": "pkg"}, {}, (60.0, None), reporter, {},
                                tmp_path / "c", out, False, {})
    assert record["served"] == 0 and record["proof"] == "failed: RuntimeError: elsewhere", record



def _code_entry(fn, states, backends, module="torch.nn.modules.module"):
    from torch._dynamo import package

    return package._DynamoCodeCacheEntry(
        package.SerializedCode.from_code_object(fn.__code__), module, [fn.__name__],
        [package._GuardedCodeCacheEntry(state, package.SerializedCode.from_code_object(fn.__code__)) for state in states],
        {}, list(backends), None, False)


def _compile_of(codes, inlined):
    from torch._dynamo import package

    return package._DynamoCacheEntry(codes, package.SourceInfo({package.InlinedSource(m, 1, 2, "c", "") for m in inlined}),
                                     "cpu", fn_name="Module._call_impl", fn_first_lineno="1")


def test_a_module_compile_entry_splits_by_class_each_with_its_own_codes_graphs_and_sources():
    """``module.compile()`` compiles torch's one ``Module._call_impl`` for every class: the entry torch
    saved (all compiles merged) is cut into one part per class, each with that class's guarded codes,
    the codes only its compiles made (a resume function), its graphs and the sources it inlined (a
    process that compiles the small model never imports the library the blocks came from)."""
    from torch._dynamo import package

    def call_impl(): ...

    def resume_in_block(): ...

    net = _compile_of([_code_entry(call_impl, [b"net"], ["__compiled_fn_1"])], ["pkg.model"])
    block = _compile_of([_code_entry(call_impl, [b"block"], ["__compiled_fn_3"]),
                         _code_entry(resume_in_block, [b"resume"], ["__compiled_fn_4"])], ["a_library.blocks"])
    other_block = _compile_of([_code_entry(call_impl, [b"block-2"], ["__compiled_fn_3"])], ["a_library.blocks"])
    merged = compile_recorder.merged_entry([net, block, other_block])
    saved = pickle.loads(pickle.dumps(package.PrecompileCacheEntry(merged, {f"__compiled_fn_{n}": n for n in (1, 3, 4)})))
    recorder = compile_recorder.Recorder("pkg")
    recorder.compiles["key"] = {id(e.codes[0]): e for e in (net, block, other_block)}
    assert recorder.parts("key", saved) == {}  # a compile of no known class: one entry, as torch saved it
    for entry, cls in ((net, "pkg.model.Net"), (block, "a_library.Block"), (other_block, "a_library.Block")):
        recorder.classes[id(entry.codes[0])] = (entry.codes[0], cls)
    parts = recorder.parts("key", saved)
    assert sorted(parts) == ["a_library.Block", "pkg.model.Net"]
    small, blocks = parts["pkg.model.Net"], parts["a_library.Block"]
    assert [[g.guards_state for g in c.guarded_codes] for c in small.dynamo.codes] == [[b"net"]]
    assert [[g.guards_state for g in c.guarded_codes] for c in blocks.dynamo.codes] == [[b"block", b"block-2"], [b"resume"]]
    assert small.backends == {"__compiled_fn_1": 1} and blocks.backends == {"__compiled_fn_3": 3, "__compiled_fn_4": 4}
    assert {s.module for s in small.dynamo.source_info.inlined_sources} == {"pkg.model"}
    assert {s.module for s in blocks.dynamo.source_info.inlined_sources} == {"a_library.blocks"}
    assert [c.guarded_codes for c in saved.dynamo.codes][0] and len(saved.dynamo.codes[0].guarded_codes) == 3  # untouched
    assert pickle.loads(pickle.dumps(blocks)).dynamo.codes[1].function_names == ["resume_in_block"]
    one_class = {id(e.codes[0]): (e.codes[0], "a_library.Block") for e in (block, other_block)}
    recorder.compiles["key"] = {k: v for k, v in recorder.compiles["key"].items() if k in one_class}
    assert recorder.parts("key", saved) == {}  # one class: nothing to split


def test_a_split_function_installs_the_part_of_the_compiled_modules_class_and_says_each_in_one_line(monkeypatch):
    monkeypatch.setattr(entry_install, "this_process", entry_install.ProcessState())
    function = served_compiles.Function(
        "torch.nn.modules.module", "Module._call_impl", 1, "dynamo/k.a.entry", "dynamo/k.guards", ({},), {},
        parts={"torch.nn.modules.linear.Linear": "dynamo/k.a.entry", "torch.nn.modules.conv.Conv1d": "dynamo/k.b.entry"})
    linear = served_compiles.part_for(function, torch.nn.Linear(2, 2)._call_impl)
    assert (linear.entry, linear.part) == ("dynamo/k.a.entry", "torch.nn.modules.linear.Linear")
    assert served_compiles.part_for(function, torch.nn.Conv1d(1, 1, 1)).entry == "dynamo/k.b.entry"
    relu = served_compiles.part_for(function, torch.nn.ReLU()._call_impl)
    assert relu.entry == "" and relu.part == "torch.nn.modules.activation.ReLU"  # no part: traced, and said
    plain = dataclasses.replace(function, parts={})
    assert served_compiles.part_for(plain, torch.nn.ReLU()) is plain
    assert entry_install.key_of(linear) == "torch.nn.modules.module.Module._call_impl [torch.nn.modules.linear.Linear]"
    assert entry_install.key_of(plain) == plain.name
    conv = served_compiles.part_for(function, torch.nn.Conv1d(1, 1, 1))
    entry_install.said(linear, "served: 1 guarded code(s)")
    entry_install.said(conv, "served: 2 guarded code(s)")
    assert entry_install.outcomes()[function.name] == ("served: torch.nn.modules.conv.Conv1d: 2 guarded code(s); "
                                                      "torch.nn.modules.linear.Linear: 1 guarded code(s)")
    entry_install.said(relu, "traced: the build's workloads compiled it for modules of other classes only")
    said = entry_install.outcomes()[function.name]
    assert said.startswith("traced: torch.nn.modules.activation.ReLU: the build's workloads compiled it for "
                           "modules of other classes only; served: torch.nn.modules.conv.Conv1d: 2 "), said  # never "served"
    entry_install._refused_at_first_run(conv, "a guarded code's compiled graphs did not load here (boom)")
    assert "torch.nn.modules.conv.Conv1d: a guarded code's compiled graphs did not load here (boom); at install, " \
           "served: 2 guarded code(s)" in entry_install.outcomes()[function.name]


def test_an_index_keeps_each_classs_part_and_never_writes_the_runs_view(tmp_path):
    function = served_compiles.Function("torch.nn.modules.module", "Module._call_impl", 1, "dynamo/k.a.entry",
                                        "dynamo/k.guards", ({},), {}, parts={"pkg.Net": "dynamo/k.a.entry"})
    key = served_compiles.source_key("Module._call_impl", 1)
    text = served_compiles.dumps(served_compiles.Index(0, {}, {key: dataclasses.replace(function, part="pkg.Net")}))
    assert '"part"' not in text and served_compiles.parse(text).functions[key] == function
    bad = text.replace('"pkg.Net": "dynamo/k.a.entry"', '"pkg.Net": 3')
    with pytest.raises(ServedError, match="`parts` .* is not each class's name and its entry's path"):
        served_compiles.parse(bad)


def test_a_part_installs_beside_the_others_on_its_code_and_says_where_torch_dropped_them(monkeypatch):
    """Torch resets a code's precompile entries as its package is made and installed; for one class's
    part, the reset is withheld (torch's uninstall imports it at each call), and an install after
    which the code holds fewer entries than before fails, where the reset was not withheld."""
    from hatch_precompile.run.torch_internals.served import shared_code

    def fn(): ...

    with shared_code.beside_others(fn.__code__, True):
        from torch._C._dynamo.eval_frame import _reset_precompile_entries
        assert _reset_precompile_entries is shared_code._kept
    from torch._C._dynamo.eval_frame import _reset_precompile_entries
    assert _reset_precompile_entries is not shared_code._kept
    with shared_code.beside_others(fn.__code__, False):
        from torch._C._dynamo.eval_frame import _reset_precompile_entries as plain
        assert plain is _reset_precompile_entries  # a function not split: torch's own install
    counts = iter([2, 0])
    monkeypatch.setattr(shared_code, "entries_on", lambda code: next(counts))  # a torch whose reset went on
    with pytest.raises(RuntimeError, match="torch dropped the entries of the classes installed before"):
        with shared_code.beside_others(fn.__code__, True):
            pass


def test_the_kernels_only_the_second_pass_built_ship_with_the_first_passs_where_its_flags_cover_them(tmp_path):
    """The backward of a module compiled in train() is lowered by torch for its entry in the second pass
    only: its kernels are copied into the first pass's cache and recorded for relocation, so a served
    process finds them built. Built with flags the first pass's kernels never used, they stay out."""
    from hatch_precompile.builder import workload_run
    from hatch_precompile.run.caches import relocate

    first, second = tmp_path / "first", tmp_path / "second"
    for key in ("cfirst", "cbackward"):
        for suffix in (".main.cpp", ".main.so"):
            (second / relocate.cache_relpath(key, suffix)).parent.mkdir(parents=True, exist_ok=True)
            (second / relocate.cache_relpath(key, suffix)).write_text(key + suffix)
    (first / relocate.cache_relpath("cfirst", ".main.so")).parent.mkdir(parents=True)
    (first / relocate.cache_relpath("cfirst", ".main.so")).write_text("the first pass's own")
    made = {"kernel_commands": {"cfirst": ["main.cpp", "g++ a"], "cbackward": ["main.cpp", "g++ b"]},
            "flag_sets": [["-mavx2"]]}
    other = {**made, "flag_sets": [["-mavx512f"]]}
    built = {"kernel_commands": {"cfirst": ["main.cpp", "g++ a"]}, "flag_sets": [["-mavx2"], ["-mfma"]]}
    workload_run._ship_built_kernels(second, first, other, built)
    assert built["kernel_commands"] == {"cfirst": ["main.cpp", "g++ a"]}
    assert not (first / relocate.cache_relpath("cbackward", ".main.so")).exists()
    workload_run._ship_built_kernels(second, first, made, built)
    assert built["kernel_commands"]["cbackward"] == ["main.cpp", "g++ b"]
    assert (first / relocate.cache_relpath("cbackward", ".main.so")).read_text() == "cbackward.main.so"
    assert (first / relocate.cache_relpath("cbackward", ".main.cpp")).is_file()
    assert (first / relocate.cache_relpath("cfirst", ".main.so")).read_text() == "the first pass's own"
    unread = {"kernel_commands": {"cother": ["main.cpp", "g++ c"]}, "flag_sets": []}  # flags not read: not shipped
    workload_run._ship_built_kernels(second, first, unread, built)
    assert "cother" not in built["kernel_commands"]


def test_an_entry_installs_at_its_modules_import_unless_that_would_be_inside_the_packages_own_load(monkeypatch):
    """The package's own modules, and a library's not imported yet (torchvision's ResNet, compiled as
    a module by the package), install as their module is imported; a library module imported already
    (torch's ``Module._call_impl``, which every ``module.compile()`` compiles) would install inside
    the package's ``load()``, importing what its entry names there, and a function split by class
    installs each part at the compile of a module of that class. A library's compile on the package's
    behalf has its graphs loaded once Dynamo is imported."""
    from hatch_precompile.run.torch_internals import import_hook

    hooked: list[str] = []
    monkeypatch.setattr(import_hook, "after_import", lambda module, patch, touchpoint=None: hooked.append(module))

    def function(module: str, qualname: str, **kw) -> served_compiles.Function:
        return served_compiles.Function(module, qualname, 1, "dynamo/e.entry", "dynamo/e.guards", ({},), {},
                                        install_at="import", **kw)

    functions = [function("pkg.model", "loss"), function("a_library_never_imported.models", "ResNet.forward"),
                 function("torch.nn.modules.module", "Module._call_impl"),
                 function("pkg.blocks", "Block.forward", parts={"pkg.blocks.Block": "dynamo/e.entry"}),
                 function("torch.nn.modules.module", "Module._wrapped_call_impl",
                          made_by={"module": "transformers.modeling_utils", "function": "f", "line": 1})]
    index = served_compiles.Index(0, {}, {str(n): f for n, f in enumerate(functions)})
    entry_install.at_imports("pkg", index)
    assert sorted(hooked) == ["a_library_never_imported.models", "pkg.model", "torch._dynamo"]


def test_a_compiles_first_code_is_told_only_where_torch_made_it_a_package():
    """The build tells one compile's entries from another's by the first code of the package torch's
    caching_precompile makes for each compile; with the flag off (or torch moved) there is none, and
    the function's compiles are shipped as one entry."""
    def shifted(x):
        return x + 1

    assert compile_scope.first_code_of(torch.compile(shifted)) is None
    assert compile_scope.first_code_of(shifted) is None
    with torch._dynamo.config.patch(caching_precompile=True):
        one, other = torch.compile(shifted), torch.compile(shifted)
    first = compile_scope.first_code_of(one)
    assert first is not None and first.python_module == __name__
    assert compile_scope.first_code_of(other) is not first  # each compile its own
