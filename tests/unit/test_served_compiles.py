"""The index of served compiles (protocol/served_compiles.py) and the torch.compile wrapper's decisions
(run/served/served_compile.py), in-process: keys as torch makes them, objects told apart by what they are."""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import hashlib
import io
import json
import logging
import pickle
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from hatch_precompile.builder.served import compile_recorder, dynamo_pass, graph_saving, guard_sites
from hatch_precompile.errors import ServedError
from hatch_precompile.protocol import dynamo_sources, served_compiles
from hatch_precompile.run.served import entry_install, held_objects, served_compile


def plain(x):
    return x + 1


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2

    @property
    def loss_function(self):  # as transformers' own: a property's getter Dynamo compiles as a frame
        return F.cross_entropy


def test_keys_are_torchs_own():
    from torch._dynamo.package import CompilePackage

    for fn in (plain, Model().forward):
        key, module, qualname, line = served_compiles.function_key(fn)
        assert key == CompilePackage.source_id_from_fn(fn)
        assert (module, qualname) == (__name__, fn.__qualname__) and line == fn.__code__.co_firstlineno
    # A module compiles its forward; a compiled wrapper, what it wraps.
    assert served_compiles.function_key(Model())[2] == "Model.forward"
    wrapper = types.SimpleNamespace(_torchdynamo_orig_callable=plain)
    assert served_compiles.function_key(wrapper)[2] == "plain"
    assert served_compiles.function_key(object()) is None


def test_options_are_compared_as_plain_data_only():
    assert served_compiles.options_key({}) == served_compiles.options_key({"backend": "inductor", "fullgraph": False})
    assert served_compiles.options_key({"mode": "max-autotune"}) != served_compiles.options_key({})
    assert served_compiles.options_key({"backend": lambda gm, inputs: gm}) is None  # a function: never served
    assert served_compiles.options_key({"a_keyword_this_version_does_not_know": 1}) is None
    function = served_compiles.Function("m", "f", 1, "dynamo/x.entry", "dynamo/x.guards", ({"backend": "inductor"},), {})
    assert served_compiles.takes(function, {}) and served_compiles.takes(function, {"fullgraph": False})
    assert not served_compiles.takes(function, {"mode": "reduce-overhead"})


def outer(weight):
    def inner(x):
        return x * weight

    return inner


def test_an_object_is_told_apart_by_what_it_is():
    assert dynamo_sources.describe(F) == {"kind": "module", "name": "torch.nn.functional"}
    assert dynamo_sources.describe(torch.nn.Linear)["qualname"] == "Linear"
    builtin = dynamo_sources.describe(torch.flatten)
    assert builtin["kind"] == "builtin" and builtin["qualname"].endswith("flatten")
    assert dynamo_sources.describe(torch.ravel) != builtin
    layer_norm = dynamo_sources.describe(F.layer_norm)
    assert layer_norm["kind"] == "function" and layer_norm["code"] == dynamo_sources.code_digest(F.layer_norm.__code__)
    # A function of another code, or of the same code over other objects, is another one.
    assert dynamo_sources.describe(lambda x: x) != dynamo_sources.describe(lambda x: x + 1)
    assert dynamo_sources.describe(outer(2.0)) == dynamo_sources.describe(outer(2.0))
    assert dynamo_sources.describe(outer(2.0)) != dynamo_sources.describe(outer(3.0))
    assert dynamo_sources.describe(outer(torch.ones(2))) is None  # a tensor: no process can be held to it
    assert dynamo_sources.describe(Model()) is None
    # An enum member by its class and name; a str subclass's instance is not a plain constant.
    assert dynamo_sources.describe(Mode.FAST) == {"kind": "enum", "name": "FAST",
                                                   "class": dynamo_sources.describe(Mode)}
    assert dynamo_sources.describe(Mode.FAST) != dynamo_sources.describe(Mode.SLOW)
    assert dynamo_sources.describe(Shouting("a")) is None and dynamo_sources.describe("a")["kind"] == "value"
    assert dynamo_sources.describe(plain.__code__) == {"kind": "code", "code": dynamo_sources.code_digest(plain.__code__)}
    assert dynamo_sources.describe(made_class()) is None  # two classes made so are told apart by nothing
    import typing

    # an object pickled by its global name, found again so (huggingface_hub's validators are keyed by them)
    assert dynamo_sources.describe(typing.Union) == {"kind": "global", "module": "typing", "name": "Union"}
    assert dynamo_sources.describe(typing.Union) != dynamo_sources.describe(typing.Literal)


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


class Shouting(str):
    def lower(self):
        return self.upper()


def made_class():
    class Made:
        pass

    return Made


def test_a_dropped_guard_is_held_or_the_guarded_code_is_traced():
    held = dynamo_sources.dropped_guard("G['F'].gelu", "BUILTIN_MATCH", ("ID_MATCH",), F.gelu, True)
    assert held["source"] == "G['F'].gelu" and held["described"] == dynamo_sources.describe(F.gelu)
    closure = dynamo_sources.dropped_guard("G['F'].layer_norm", "CLOSURE_MATCH", (), F.layer_norm, True)
    assert closure["code"] and closure["described"] == {"kind": "code",
                                                        "code": dynamo_sources.code_digest(F.layer_norm.__code__)}
    # The call's own objects: a class or a function at a path from its locals is held; an instance never.
    local = dynamo_sources.dropped_guard("L['self'].__class__", "CLASS_MATCH", ("ID_MATCH",), Model, True)
    assert local["described"] == dynamo_sources.describe(Model)
    assert "no new process can tell" in dynamo_sources.dropped_guard("L['model']", "ID_MATCH", (), Model(), True)
    assert "state" in dynamo_sources.dropped_guard("G['CONFIG']", "DICT_VERSION", (), {}, True)
    assert "no new process can tell" in dynamo_sources.dropped_guard("G['obj']", "ID_MATCH", (), Model(), True)
    assert "a path this version does not evaluate" in dynamo_sources.dropped_guard("G['f'](1)", "ID_MATCH", (),
                                                                                    plain, True)


class _Config:
    def __init__(self):
        self.size = 3


_CONFIG = _Config()


def _copies_the_config(x):
    made = copy.deepcopy(_CONFIG)
    return x * made.size


def test_an_identity_guard_that_cannot_be_served_says_where_the_trace_made_it():
    seen = []

    def keep(entries):
        seen.extend(entries)
        return [True] * len(entries)

    torch._dynamo.reset()
    torch.compile(_copies_the_config, backend="eager", options={"guard_filter_fn": keep})(torch.ones(2))
    made = next(e for e in seen if e.guard_type == "ID_MATCH" and e.orig_guard.name == "G['_CONFIG']")
    where = guard_sites.made_at(made.orig_guard.user_stack)
    # deepcopy's id(x), and the line of the package's own code that called deepcopy
    assert where.startswith("`d = id(x)` in deepcopy at copy.py:")
    assert where.endswith(f"called from `made = copy.deepcopy(_CONFIG)` in _copies_the_config at "
                          f"{Path(__file__).name}:{_copies_the_config.__code__.co_firstlineno + 1}")
    said = dynamo_sources.dropped_guard("G['_CONFIG']", "ID_MATCH", (), _CONFIG, True, where)
    assert said.startswith("ID_MATCH guard on G['_CONFIG'] (an object no new process can tell apart from "
                           "another; made by `d = id(x)` in deepcopy")
    # no stack kept, or one of another shape: said without it
    assert guard_sites.made_at(None) is None and guard_sites.made_at([object()]) is None
    assert dynamo_sources.dropped_guard("G['_CONFIG']", "ID_MATCH", (), _CONFIG, True, None).endswith("from another)")


@pytest.mark.parametrize("source, local", [
    ("G['F'].gelu", False), ("G['torch'].nn['x'][2]", False), ("L['self'].__class__", True),
    ("type(L['self'].config).__mro__[4].__getattribute__", True),
    ("dict(type(L['self']._modules['h']).__dict__)['forward'].__closure__[0].cell_contents", True),
    ("dict.__getitem__(G['m']._REGISTRY, list(dict.keys(G['m']._REGISTRY))[1])['hi']", False),
    # diffusers' attention backend registry, a function found by its key's position
    ("G['__import_d'].Registry._backends[list(dict.keys(G['__import_d'].Registry._backends))[11]]", False),
])
def test_dynamos_paths_are_evaluated(source, local):
    code, reads_locals = dynamo_sources.evaluator(source)
    assert reads_locals == local and isinstance(code, types.CodeType)


@pytest.mark.parametrize("source", [
    "G['os'].system('x')", "__import__('os')", "G['f'](1)", "dict(G['x'])", "type(G['a'], G['b'])", "X['a']",
    "list(G['a'])", "G[G['k']]", "L['a'] or G['b']", "(lambda: 1)()", "G['a'][True]", "G['a'].b(", "",
    "dict.update(G['a'], G['b'])", "type(G['a']).mro()",
    "G['a'][list(G['a'])[1]]", "G['a'][G['b'][1]]", "G['a'][list(dict.keys(G['a']))[G['i']]]",
])
def test_nothing_else_is_ever_evaluated(source):
    assert dynamo_sources.evaluator(source) is None
    assert "a path this version does not evaluate" in dynamo_sources.dropped_guard(source, "ID_MATCH", (), plain, True)


def test_a_source_in_the_calls_locals_is_pinned_by_the_first_call_that_brings_the_builds_object():

    dropped = [dynamo_sources.dropped_guard("L['self'].__class__", "CLASS_MATCH", ("ID_MATCH",), Model, True),
               dynamo_sources.dropped_guard("L['fn']", "CLOSURE_MATCH", (), outer(2.0), True),
               dynamo_sources.dropped_guard("G['F'].gelu", "BUILTIN_MATCH", ("ID_MATCH",), F.gelu, True)]
    check, held = held_objects.held(dropped, {"F": F})
    assert held == 3

    class Other(Model):
        pass

    assert not check({"self": Other(), "fn": outer(2.0)})  # another class: not pinned, traced
    assert not check({"self": Model(), "fn": plain})  # another function's code
    assert not check({"fn": outer(2.0)})  # a local missing: traced, never raised
    assert check({"self": Model(), "fn": outer(2.0)})  # the build's objects: pinned
    assert check({"self": Model(), "fn": outer(5.0)})  # Dynamo holds a closure's code (its cells have guards of their own)
    again = type("Model", (torch.nn.Module,), {"__module__": __name__})  # described as Model, but another object
    assert not check({"self": again(), "fn": outer(2.0)})
    assert not held_objects.held(dropped, {"F": types.SimpleNamespace(gelu=plain)})[0]  # a global that is not the build's


def test_the_index_reads_back_and_refuses_what_it_cannot_serve():
    key = served_compiles.source_key("plain", 3)
    reads = [served_compiles.absent("G['os'].environ._data", b"HOME"), served_compiles.empty("L['self']._forward_hooks"),
             served_compiles.fact("torch.distributed.is_initialized", "False", None)]
    function = served_compiles.Function(__name__, "plain", 3, f"dynamo/{key}.entry", f"dynamo/{key}.guards",
                                        ({"dynamic": None},),
                                        {"a" * 64: {"held": [{"source": "G['F']", "type": "MODULE_MATCH", "code": False,
                                                              "described": {"kind": "module", "name": "F"}}],
                                                    "reads": reads, "settings": "d1"},
                                         "b" * 64: "an object no new process can tell apart from another"})
    index = served_compiles.Index(0, {"d1": {"inductor": {"a": 1}}}, {key: function})
    text = served_compiles.dumps(index)
    assert served_compiles.parse(text) == index
    assert served_compiles.key_of(reads[0]) == b"HOME"
    with pytest.raises(ServedError, match="compiler settings"):
        served_compiles.parse(json.dumps({**json.loads(text), "settings": None}))
    with pytest.raises(ServedError, match="optimization level"):
        served_compiles.parse(json.dumps({**json.loads(text), "optimize": None}))
    data = json.loads(text)
    with pytest.raises(ServedError, match="format"):
        served_compiles.parse(json.dumps({**data, "format": 1}))  # an index built by an earlier hatch-precompile
    wrong = {**data, "functions": {"0" * 64: data["functions"][key]}}
    with pytest.raises(ServedError, match="not keyed by its name and line"):
        served_compiles.parse(json.dumps(wrong))
    for field, value, says in (("source", "G['os'].system('x')", "not one this version can hold"),):
        evil = json.loads(text)
        evil["functions"][key]["guarded"]["a" * 64]["held"][0][field] = value
        with pytest.raises(ServedError, match=says):
            served_compiles.parse(json.dumps(evil))
    for read, says in (({"kind": "absent", "source": "G['os'].system('x')", "key": "'a'"}, "cannot evaluate"),
                       ({"kind": "absent", "source": "G['d']", "key": "__import__('os')"}, "malformed"),
                       ({"kind": "fact", "call": "os.system"}, "a folded call this version does not make"),
                       ({"kind": "hooks"}, "of no kind")):
        evil = json.loads(text)
        evil["functions"][key]["guarded"]["a" * 64]["reads"] = [read]
        with pytest.raises(ServedError, match=says):
            served_compiles.parse(json.dumps(evil))
    evil = json.loads(text)
    evil["functions"][key]["guarded"]["a" * 64]["settings"] = "d2"
    with pytest.raises(ServedError, match="settings the index does not hold"):
        served_compiles.parse(json.dumps(evil))
    # Installed at torch.compile unless the build's proof installed it at its first call, or at its
    # module's import.
    assert json.loads(text)["functions"][key]["install_at"] == "compile"
    later = json.loads(text)
    for at in ("first-call", "import"):
        later["functions"][key]["install_at"] = at
        assert served_compiles.parse(json.dumps(later)).functions[key].install_at == at
    del later["functions"][key]["install_at"]  # an index from before the field: at torch.compile
    assert served_compiles.parse(json.dumps(later)) == index
    later["functions"][key]["install_at"] = "startup"
    with pytest.raises(ServedError, match="'startup' is none of compile, first-call, import"):
        served_compiles.parse(json.dumps(later))
    # What no new process can check is a reason, recorded in place of the read.
    assert "no new process can name" in served_compiles.absent("G['d']", object())
    assert "does not evaluate" in served_compiles.empty("G['f'](1)._forward_hooks")


def test_only_the_packages_own_calls_are_wrapped_and_the_decorator_is_its_callers(monkeypatch):
    calls = []

    def original(model=None, **options):
        calls.append((model, options))
        return model

    monkeypatch.setattr(entry_install, "this_process", entry_install.ProcessState())
    entry_install.this_process.packages[__name__.rsplit(".", 1)[0]] = None  # this test module's package
    served = []
    monkeypatch.setattr(served_compile, "_served", lambda package, model, options, original_, at=None: served.append(
        (package, model, options)) or original_(model, **options))
    wrapped = served_compile._compile_wrapper(original)
    assert wrapped(plain, dynamic=True) is plain
    decorator = wrapped(mode="max-autotune")
    assert decorator(plain) is plain
    assert [s[0] for s in served] == ["unit", "unit"] and served[1][2] == {"mode": "max-autotune"}
    assert calls == [(plain, {"dynamic": True}), (plain, {"mode": "max-autotune"})]
    entry_install.this_process.packages.clear()  # another package's call: torch's, untouched
    assert wrapped(plain) is plain and len(served) == 2


def test_a_librarys_compile_is_served_only_as_the_build_recorded_it_made_on_the_packages_behalf(monkeypatch):
    """A library's torch.compile is routed to the package only where the build recorded that very call
    (its module and function) compiling that function; what it returns is marked to serve only while
    the package's code runs it. Any other call of the library's, and the package's own compile of a
    function a library made, are torch's."""
    library = types.ModuleType("a_library")
    exec("def get_compiled(compile, fn):\n    return compile(fn)\n\n\ndef elsewhere(compile, fn):\n"
         "    return compile(fn)\n", library.__dict__)
    at = {"module": "a_library", "function": "get_compiled", "line": 2}
    key, module, qualname, line = served_compiles.function_key(plain)
    function = served_compiles.Function(module, qualname, line, "dynamo/k.entry", "dynamo/k.guards", ({},),
                                        {"a" * 64: {"held": [], "reads": [], "settings": "s"}}, made_by=at)
    index = served_compiles.Index(0, {}, {key: function})
    monkeypatch.setattr(entry_install, "this_process", entry_install.ProcessState())
    entry_install.this_process.packages["unit"] = entry_install.Package(None, index)
    routed = []
    monkeypatch.setattr(served_compile, "_served", lambda package, model, options, original_, at=None: routed.append(
        (package, at)) or original_(model, **options))
    wrapped = served_compile._compile_wrapper(lambda model=None, **options: model)
    assert library.get_compiled(wrapped, plain) is plain and routed == [("unit", dict(at, line=2))]
    assert library.elsewhere(wrapped, plain) is plain and len(routed) == 1  # another call of the library's
    assert function.name == f"{module}.{qualname}, compiled by a_library.get_compiled (line 2)"
    monkeypatch.undo()
    monkeypatch.setattr(entry_install, "this_process", entry_install.ProcessState())
    entry_install.this_process.packages["unit"] = entry_install.Package(None, index)
    assert served_compile._shipped("unit", plain, {}, None) is None  # the package's own compile of it
    assert entry_install.outcomes()[function.name].startswith("traced: compiled by the package itself")
    assert served_compile._shipped("unit", plain, {}, at) is function


def test_what_a_library_compiled_is_served_while_the_packages_code_runs_it():
    from hatch_precompile.run.served import dependency_compiles

    library = types.ModuleType("a_library")
    exec("def call(check):\n    return check()\n\n\ndef store(check, found):\n    found.append(check())\n",
         library.__dict__)
    assert library.call(dependency_compiles.running("unit"))  # this test is the package ``unit``'s code
    assert not library.call(dependency_compiles.running("another_package"))
    import threading

    found: list[bool] = []
    worker = threading.Thread(target=library.store, args=(dependency_compiles.running("unit"), found))
    worker.start()
    worker.join()
    assert found == [False]  # a thread the package's code did not start: its own stack holds none of it


def test_an_entry_whose_every_guarded_code_is_traced_is_not_installed(monkeypatch):
    from hatch_precompile.run.torch_internals.served import dynamo_cache

    monkeypatch.setattr(entry_install, "this_process", entry_install.ProcessState())
    entry_install.this_process.packages["unit"] = None  # never read: nothing is installed
    monkeypatch.setattr(dynamo_cache, "install", lambda *a, **k: pytest.fail("installed an entry no call can run"))
    why = "DICT_VERSION guard on G['CONFIG'] (an object's state, which no new process can check)"
    function = served_compiles.Function("unit.m", "apply", 3, "dynamo/k.entry", "dynamo/k.guards", ({},), {"a" * 64: why})
    entry_install.install("unit", plain, function)
    assert served_compile.served() == {"unit.m.apply": f"traced: {why}"}


def test_an_entry_installed_at_its_modules_import_is_said_once_the_package_compiles_it(monkeypatch):
    monkeypatch.setattr(entry_install, "this_process", entry_install.ProcessState())
    line = Model.forward.__code__.co_firstlineno
    forward = served_compiles.Function(__name__, "Model.forward", line, "dynamo/k.entry", "dynamo/k.guards", ({},),
                                       {"a" * 64: {"held": {}, "reads": {}, "settings": "s"}}, install_at="import")
    index = served_compiles.Index(0, {}, {served_compiles.source_key("Model.forward", line): forward})
    found = types.SimpleNamespace(manifest=types.SimpleNamespace(env={}, settings={}))
    entry_install.this_process.packages["unit"] = entry_install.Package(found, index)
    installs = []

    def install(package, fn, function, compiled=None):  # as entry_install.install: once a process
        if f"{function.module}.{function.qualname}" in entry_install.this_process.tried:
            return False
        installs.append(fn)
        entry_install.this_process.tried.add(f"{function.module}.{function.qualname}")
        if outcome is None:
            raise RuntimeError("torch moved")
        entry_install.said(function, outcome)
        return outcome is not None and not outcome.startswith("traced: not there yet")

    monkeypatch.setattr(entry_install, "install", install)
    module = sys.modules[__name__]
    # Another function under the name (its first line moved): left to torch.compile.
    entry_install._install_at_import("unit", [dataclasses.replace(forward, firstlineno=line + 1)], module)
    # A failing install never reaches the import, and a source not there yet keeps nothing: each is
    # left to torch.compile, which installs it as it would have.
    for outcome in (None, "traced: not there yet"):
        entry_install._install_at_import("unit", [forward], module)
        assert not entry_install.this_process.tried and not entry_install.this_process.outcomes
    outcome = "served: 1 guarded code(s)"
    entry_install._install_at_import("unit", [forward], module)
    assert installs == [Model.forward] * 3 and served_compile.installed_at_import() == [f"{__name__}.Model.forward"]
    assert served_compile.served() == {}  # not asked for yet
    compiled = served_compile._served("unit", Model(), {}, torch.compile)
    assert isinstance(compiled, torch.nn.Module) and len(installs) == 3  # not installed again
    assert served_compile.served() == {f"{__name__}.Model.forward": "served: 1 guarded code(s)"}
    # Said once: a guarded code refused at its first run stays said so through the package's later compiles.
    entry_install._refused_at_first_run(forward, "its graphs did not load here")
    served_compile._served("unit", Model(), {}, torch.compile)
    assert served_compile.served()[f"{__name__}.Model.forward"].startswith("traced: its graphs did not load here")
    assert len(installs) == 3


def test_a_propertys_getter_is_named_as_torchs_install_finds_it():
    from torch._dynamo import package

    from hatch_precompile.builder.served import dynamo_packaging
    from hatch_precompile.run.torch_internals import patching

    getter = Model.loss_function.fget.__code__
    with pytest.raises(package.PackageError):  # torch's own lookup stops at the property
        package._get_code_source(getter)
    name, path = dynamo_packaging.property_accessor({"code": getter})
    assert (name, path) == ("Model.loss_function", "fget.__code__")
    entry = types.SimpleNamespace(python_module=__name__, function_names=[name], code_source=path)
    assert package._lookup_code(entry) is getter  # what torch walks when it installs the entry
    for other in (plain.__code__, Model.forward.__code__, None, {}):
        assert dynamo_packaging.property_accessor({"code": other}) is patching.PASS
    assert dynamo_packaging.property_accessor({}) is patching.PASS  # torch's signature unread: torch answers


def test_an_entry_no_call_could_run_is_not_shipped_and_the_build_says_why(tmp_path):
    import hashlib
    import pickle


    recorder = compile_recorder.Recorder("unit")
    entries = {}
    for name, line, guards in (("kept", 3, b"held"), ("dropped", 7, b"never"), ("graphless", 11, b"bypassed")):
        key = served_compiles.source_key(name, line)
        code = types.SimpleNamespace(python_module="unit.m", guarded_codes=[types.SimpleNamespace(guards_state=guards)],
                                     bypassed=guards == b"bypassed")  # torch's mark: "Backend not found"
        codes = [code]
        if name == "dropped":  # a frame it called whose guards torch did not save: a compiled optimizer's step
            python = types.SimpleNamespace(co_qualname="Adam.step", co_name="step", co_firstlineno=214)
            codes.append(types.SimpleNamespace(python_module="torch.optim.adam", guarded_codes=[], bypassed=True,
                                               python_code=python))
            recorder.bypassed[served_compiles.source_key("Adam.step", 214)] = "Graph contains named parameters ..."
        entry = types.SimpleNamespace(dynamo=types.SimpleNamespace(codes=codes, fn_name=name, fn_first_lineno=line))
        (tmp_path / "cache" / key).mkdir(parents=True)
        (tmp_path / "cache" / key / "entry").write_bytes(pickle.dumps(entry))
        recorder.options[key], recorder.modules[key] = [{}], ("unit.m", name)
        entries[name] = key
    why = "WEAKREF_ALIVE guard on L['self'] (an object's state, which no new process can check)"
    held = hashlib.sha256(b"held").hexdigest()
    recorder.guarded = {held: {"held": [], "reads": [], "settings": "d"}, hashlib.sha256(b"never").hexdigest(): why}
    recorder.lines = {held: ["RootGuardManager", "| +- TENSOR_MATCH: ..."]}
    no_graph = "torch did not save its compiled graph (AOTAutograd cache unable to serialize compiled graph: ...)"
    functions, notes = dynamo_pass._index(recorder, tmp_path / "cache", tmp_path / "out", no_graph)
    assert list(functions) == [entries["kept"]] and (tmp_path / "out" / f"{entries['kept']}.entry").is_file()
    from hatch_precompile.run.torch_internals.served import guard_text

    assert guard_text.unpacked((tmp_path / "out" / f"{entries['kept']}.guards").read_bytes()) == recorder.lines
    assert not (tmp_path / "out" / f"{entries['dropped']}.entry").exists()
    assert not (tmp_path / "out" / f"{entries['graphless']}.entry").exists()
    assert notes == [f"unit.m.dropped: every guarded code it compiled would be traced, so its entry is not shipped: {why}"
                     "; torch saved no guards for Adam.step (Graph contains named parameters ...)",
                     f"unit.m.graphless: {no_graph}"]


def test_a_compile_whose_guards_torch_cannot_save_finishes_unserved_and_the_build_says_why(tmp_path):
    """Torch marks the entry bypassed, leaves the guards' state None and then fails the compile on that
    (and with it the pass): the second pass lets it finish with an empty state (which a bypassed entry
    never takes), names the function and quotes torch. Anything else keeps torch's own check."""

    recorder = compile_recorder.Recorder("unit")
    code = scaled_twice.__code__
    reason = "Guard evaluation failed: Can't pickle local object 'make.<locals>.scale'"
    record = logging.LogRecord("torch._dynamo.output_graph", logging.WARNING, __file__, 1,
                               "Detected a package bypass: %s", (reason,), None)
    assert recorder._bypass_log(record) is False  # the build's line says it, once
    manager = types.SimpleNamespace(guards_state=None)
    recorder._bypassed({"self": manager, "output_graph": types.SimpleNamespace(package=None), "f_code": code,
                        "save_guards": True}, None)
    assert manager.guards_state == b""
    for arguments in ({"output_graph": types.SimpleNamespace(package=object()), "save_guards": True},  # not a bypass
                      {"output_graph": types.SimpleNamespace(package=None), "save_guards": False},  # nothing saved
                      {"save_guards": True}):  # another signature: nothing read
        untouched = types.SimpleNamespace(guards_state=None)
        recorder._bypassed({"self": untouched, "f_code": code, **arguments}, None)
        assert untouched.guards_state is None
    key = served_compiles.source_key(code.co_qualname, code.co_firstlineno)
    assert recorder.bypassed == {key: reason}
    assert recorder._guarded_code({"guards_state": b""}) is None and recorder.guarded == {}

    bypassed = types.SimpleNamespace(python_module="unit.m", guarded_codes=[], bypassed=True)
    entry = types.SimpleNamespace(dynamo=types.SimpleNamespace(codes=[bypassed], fn_name="scaled_twice",
                                                               fn_first_lineno=code.co_firstlineno))
    (tmp_path / "cache" / key).mkdir(parents=True)
    (tmp_path / "cache" / key / "entry").write_bytes(pickle.dumps(entry))
    recorder.options[key], recorder.modules[key] = [{}], ("unit.m", "scaled_twice")
    functions, notes = dynamo_pass._index(recorder, tmp_path / "cache", tmp_path / "out", "no graph")
    assert functions == {} and notes == [f"unit.m.scaled_twice: torch could not save its guards ({reason})"]


def test_a_frame_torch_bypassed_after_its_trace_keeps_torch_s_reason_for_the_build_s_note():
    """A compiled optimizer's step: torch bypasses the frame once its graph holds the parameters, then still
    builds and hands over its guards; the reason it logged is kept by the frame's code, once. A package of
    another shape (no ``_current_entry``) is read as no bypass, and nothing raises."""
    recorder = compile_recorder.Recorder("unit")
    reason = "Graph contains named parameters due to static addresses."
    record = logging.LogRecord("torch._dynamo.output_graph", logging.WARNING, __file__, 1,
                               "Detected a package bypass: %s", (reason,), None)
    python = types.SimpleNamespace(co_qualname="Adam.step", co_firstlineno=214)
    for package in (types.SimpleNamespace(), types.SimpleNamespace(_current_entry=None),
                    types.SimpleNamespace(_current_entry=types.SimpleNamespace(bypassed=True, python_code=python))):
        assert recorder._bypass_log(record) is False
        recorder._guarded_code({"self": package, "guards_state": None})
    assert recorder.bypassed == {served_compiles.source_key("Adam.step", 214): reason}
    assert recorder._bypass_reason == "" and recorder.guarded == {}


def scaled_twice(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args) * 2

    return wrapper


@scaled_twice
def decorated(x):
    return x + 1


def hooked_guards_pickler(hook, tree: dict | None = None):
    """Torch's guards-state pickler (its guard tree ``tree``) and its stream, ``hook`` answering first,
    as the guard-pickler touchpoint's hook does: torch answers where it passes."""
    from torch._dynamo import guards

    from hatch_precompile.run.torch_internals import patching

    stream = io.BytesIO()
    writer = guards.GuardsStatePickler(tree or {}, {}, {}, stream)

    def reducer_override(obj):
        ours = hook({"self": writer, "obj": obj})
        return guards.GuardsStatePickler.reducer_override(writer, obj) if ours is patching.PASS else ours

    writer.reducer_override = reducer_override
    return writer, stream


def test_a_decorated_function_is_kept_in_the_guards_state_as_torch_keeps_a_nested_one():
    import io

    from torch._dynamo import guards

    from hatch_precompile.builder.served import dynamo_packaging
    from hatch_precompile.run.torch_internals import patching

    inner = decorated.__wrapped__  # its name finds the wrapper, not itself
    pickler = guards.GuardsStatePickler({}, {}, {}, io.BytesIO())
    assert pickler.reducer_override(inner)[0] is guards._Missing  # torch keeps a placeholder
    rebuild, args, (_, names) = dynamo_packaging.decorated_function({"self": pickler, "obj": inner})
    assert names == {"__name__": "decorated"}
    writer, stream = hooked_guards_pickler(dynamo_packaging.decorated_function)
    writer.dump(inner)
    again = pickle.loads(stream.getvalue())  # as torch reads a guards state back
    assert again.__code__ == inner.__code__ and again.__globals__ is inner.__globals__ and again(1) == 2
    assert (again.__name__, again.__qualname__) == (inner.__name__, inner.__qualname__)  # guards read __name__
    for kept_by_torch in (plain, decorated, len):  # by name, the wrapper itself, a builtin
        assert dynamo_packaging.decorated_function({"self": pickler, "obj": kept_by_torch}) is patching.PASS
    nested = outer(2.0)  # torch keeps it by its code, and names it by its qualname when it rebuilds it
    rebuild, args, (_, names) = dynamo_packaging.decorated_function({"self": pickler, "obj": nested})
    assert names == {"__name__": nested.__name__} and rebuild(*args).__qualname__ == nested.__qualname__
    pickler.missing_values[id(inner)] = inner  # torch's own choice for an object comes first
    assert dynamo_packaging.decorated_function({"self": pickler, "obj": inner}) is patching.PASS
    assert dynamo_packaging.decorated_function({}) is patching.PASS  # torch's signature unread: torch answers


foreign = types.FunctionType(plain.__code__, vars(json), "foreign")  # named here, runs with json's globals


def test_a_code_is_named_by_the_globals_it_runs_with_or_traced():
    from hatch_precompile.run.torch_internals.served import dynamo_cache

    def entry(*others):
        return types.SimpleNamespace(codes=[types.SimpleNamespace(python_module=__name__), *others])

    dynamo = entry()
    assert dynamo_cache._codes_of_other_globals(foreign, dynamo) == {} and dynamo.codes[0].python_module == "json"
    dynamo = entry()
    nowhere = types.FunctionType(plain.__code__, {"__name__": "nowhere"})
    assert list(dynamo_cache._codes_of_other_globals(nowhere, dynamo)) == [id(plain.__code__)]
    assert dynamo.codes[0].python_module == __name__  # left as torch named it; its guarded codes are traced

    def code(name, source):
        return types.SimpleNamespace(python_module=__name__, function_names=[name], code_source=source,
                                     install_to_global=False)

    dynamo = entry(code("decorated", "__wrapped__.__code__"), code("foreign", "__code__"),
                   types.SimpleNamespace(install_to_global=True, code_source=None))  # a resume function
    found = dynamo_cache._codes_of_other_globals(decorated, dynamo)
    assert list(found) == [id(plain.__code__)] and "another module's globals" in found[id(plain.__code__)]


def test_a_module_dynamo_loads_by_its_address_travels_with_the_entry_or_the_entry_is_refused():
    from hatch_precompile.builder.served import dynamo_packaging
    from hatch_precompile.run.torch_internals.served import dynamo_cache, entry_graphs

    recorded = []
    output = types.SimpleNamespace(package=types.SimpleNamespace(add_import_source=lambda *a: recorded.append(a)))
    dynamo_packaging.module_as_import({"self": output, "value": json}, "___module_json_1_c2")
    dynamo_packaging.module_as_import({"self": output, "value": plain}, "___function_1_c2")  # not a module: torch's
    dynamo_packaging.module_as_import({"self": types.SimpleNamespace(package=None), "value": json}, "___module_json_1_c3")
    assert recorded == [("___module_json_1_c2", "json")]

    def entry(source):
        guarded = types.SimpleNamespace(dynamo_code=compile(source, "<dynamo>", "exec"))
        return types.SimpleNamespace(codes=[types.SimpleNamespace(python_module=__name__, guarded_codes=[guarded])])

    def missing(source):  # as the install asks: the globals each guarded code loads, read once
        dynamo = entry(source)
        return dynamo_cache._missing_global(dynamo, entry_graphs.globals_by_code(dynamo, lambda c: c))

    assert missing("def f():\n    return ___module_json_1_c2.dumps(1)") == \
        "its compiled code loads '___module_json_1_c2', which the entry does not bring (torch's)"
    # the package's own globals (one its module defines after the compiling line), builtins, installed names
    assert missing("defined_later(len(__name__), plain)") is None


@dataclasses.dataclass
class _Code:  # the fields of torch's _DynamoCodeCacheEntry that merging reads
    python_code: str
    guarded_codes: list
    backend_ids: list
    import_sources: dict = dataclasses.field(default_factory=dict)
    python_module: str = "m"
    function_names: list = dataclasses.field(default_factory=list)
    code_source: str | None = None
    install_to_global: bool = False
    bypassed: bool = False


@dataclasses.dataclass
class _Sources:
    inlined_sources: set


@dataclasses.dataclass
class _Entry:
    codes: list
    source_info: _Sources
    device_type: str = "cpu"


def test_every_compile_of_a_function_is_kept_in_its_one_entry():
    from torch._dynamo.precompile_context import PrecompileContext


    eval_mode = _Entry([_Code("forward", ["g1"], ["fn1"], {"__import_a": "a"})], _Sources({"s1"}))
    train_mode = _Entry([_Code("forward", ["g2"], ["fn2", "fn1"]), _Code("resume", ["g3"], ["fn3"], install_to_global=True)],
                        _Sources({"s2"}))
    merged = compile_recorder.merged_entry([eval_mode, train_mode])
    (own, resume) = merged.codes
    assert own.guarded_codes == ["g1", "g2"] and own.backend_ids == ["fn1", "fn2"] and own.import_sources == {"__import_a": "a"}
    assert resume.guarded_codes == ["g3"] and merged.source_info.inlined_sources == {"s1", "s2"}
    assert eval_mode.codes[0].guarded_codes == ["g1"]  # each compile's own entry is left as torch made it
    cuda = _Entry([_Code("forward", ["g4"], ["fn4"])], _Sources(set()), device_type="cuda")
    assert compile_recorder.merged_entry([eval_mode, cuda]) is cuda  # another device: the last, as torch keeps it
    # A compile re-records its own entry as it grows; another compile of the function is merged with it.
    recorder = compile_recorder.Recorder("unit")
    try:
        recorder._every_compile({"cache_entry": eval_mode, "key": "k"}, None)
        grown = _Entry([eval_mode.codes[0], _Code("resume0", ["g0"], ["fn0"], install_to_global=True)], _Sources(set()))
        recorder._every_compile({"cache_entry": grown, "key": "k"}, None)
        recorder._every_compile({"cache_entry": train_mode, "key": "k"}, None)
        recorded = PrecompileContext._dynamo_cache_entries["k"]
        assert [c.python_code for c in recorded.codes] == ["forward", "resume0", "resume"]
        assert recorded.codes[0].guarded_codes == ["g1", "g2"]
    finally:
        PrecompileContext._dynamo_cache_entries.pop("k", None)


def test_one_resume_function_two_compiles_made_is_one_code_installing_both_names():
    # Torch keys an entry's codes by their code: two equal codes would install the last one's name only,
    # and the first compile's bytecode would load a name the entry does not bring.
    first = _Entry([_Code("step", ["g1"], ["fn1"]), _Code("resume", [], [], function_names=["__resume_at_42_2"],
                                                       install_to_global=True)], _Sources(set()))
    second = _Entry([_Code("step", ["g2"], ["fn2"]), _Code("resume", [], [], function_names=["__resume_at_42_18"],
                                                        install_to_global=True)], _Sources(set()))
    merged = compile_recorder.merged_entry([first, second])
    assert [c.python_code for c in merged.codes] == ["step", "resume"]
    assert merged.codes[1].function_names == ["__resume_at_42_2", "__resume_at_42_18"]
    assert first.codes[1].function_names == ["__resume_at_42_2"]  # each compile's own entry as torch made it


class _Artifact:  # torch's backend artifact: its graph made by after_deserialization()
    def __init__(self, name, fails=False):
        self.name, self.fails, self.loads = name, fails, 0

    def after_deserialization(self):
        self.loads += 1
        if self.fails:
            raise RuntimeError(f"{self.name} does not load here")
        return lambda x: f"{self.name}({x})"


class _Root:  # a guard manager's root: the guards added to it
    def __init__(self):
        self.last, self.each = [], []

    def add_epilogue_lambda_guard(self, guard, parts, _):
        self.last.append(guard)

    def add_lambda_guard(self, guard, parts, _):
        self.each.append(guard)


class _OlderRoot:  # a torch whose guard managers have no last guards
    def __init__(self):
        self.each = []

    def add_lambda_guard(self, guard, parts, _):
        self.each.append(guard)


def _same(frame_locals):
    return None


class _Gate:  # torch's compile controls, as compile_controls.Gate answers them: open, no reset seen
    def __init__(self):
        self.open, self.resets, self.runs = True, 0, 0

    def allows(self, frame_locals):
        return self.open

    def generation(self):
        return self.resets

    def has_run(self):
        self.runs += 1


def test_a_guarded_codes_graphs_load_when_its_guards_first_hold_and_a_failure_traces_it():
    from hatch_precompile.run.torch_internals.served import entry_graphs

    artifacts = {"__compiled_fn_1": _Artifact("eval"), "__compiled_fn_2": _Artifact("train"),
                 "__compiled_fn_3": _Artifact("broken", fails=True)}
    said = []
    graphs = entry_graphs.Graphs(artifacts, said.append)
    state = {name: f"state of {name}".encode() for name in ("eval", "train", "broken")}

    def guarded(name, source):
        return types.SimpleNamespace(guards_state=state[name], dynamo_code=compile(source, "<dynamo>", "exec"))

    entry = types.SimpleNamespace(codes=[
        types.SimpleNamespace(guarded_codes=[guarded("eval", "__compiled_fn_1(x)"), guarded("train", "__compiled_fn_2(len(x))"),
                                             guarded("broken", "def resume():\n    return __compiled_fn_3(x)")]),
        types.SimpleNamespace(bypassed=True, guarded_codes=[guarded("eval", "__compiled_fn_2(x)")]),  # never installed
    ])
    calls = graphs.called_by(entry, entry_graphs.globals_by_code(entry, lambda c: c))
    digest = {name: hashlib.sha256(raw).hexdigest() for name, raw in state.items()}
    assert calls == {digest["eval"]: {"__compiled_fn_1"}, digest["train"]: {"__compiled_fn_2"},
                     digest["broken"]: {"__compiled_fn_3"}}
    stand_ins = {name: d.after_deserialization() for name, d in graphs.deferred().items()}
    assert sum(a.loads for a in artifacts.values()) == 0  # torch's install loads nothing now
    roots = {name: _Root() for name in state}
    for name, root in roots.items():
        graphs.last_guard(root, calls[digest[name]], _same, said.append, _Gate())
    (eval_guard,), (broken_guard,) = roots["eval"].last, roots["broken"].last
    assert eval_guard({}) and eval_guard({}) and artifacts["__compiled_fn_1"].loads == 1
    assert artifacts["__compiled_fn_2"].loads == 0  # the training graph: no call of its guarded code yet
    assert stand_ins["__compiled_fn_1"]("x") == "eval(x)"
    assert not broken_guard({}) and not broken_guard({})  # traced, and not tried again
    assert artifacts["__compiled_fn_3"].loads == 1 and said == ["RuntimeError('broken does not load here')"]
    # A torch whose guard managers have no last guards: loaded at install, where a failure refuses the entry.
    graphs.last_guard(_OlderRoot(), {"__compiled_fn_2"}, _same, said.append, _Gate())
    assert artifacts["__compiled_fn_2"].loads == 1
    with pytest.raises(RuntimeError, match="does not load"):
        entry_graphs.Graphs(artifacts, said.append).last_guard(_OlderRoot(), {"__compiled_fn_3"}, _same, said.append, _Gate())
    # One compile's entry: torch's install loads each graph itself, so that its first call runs at
    # once, with no stand-in between; its last guard loads nothing. What loaded is kept for an install
    # tried again (torch could not rebuild the guards yet), which loads nothing again.
    one = {"__compiled_fn_1": _Artifact("only")}
    root, at_install = _Root(), entry_graphs.Graphs(one, said.append, at_install=True)
    at_install.last_guard(root, {"__compiled_fn_1"}, _same, said.append, _Gate())
    assert root.last[0]({}) and one["__compiled_fn_1"].loads == 0
    graph = at_install.deferred()["__compiled_fn_1"].after_deserialization()
    assert graph("x") == "only(x)" and one["__compiled_fn_1"].loads == 1
    again = entry_graphs.Graphs(one, said.append, at_install=True, loaded=at_install.ahead())
    assert again.deferred()["__compiled_fn_1"].after_deserialization() is graph and one["__compiled_fn_1"].loads == 1


def test_what_a_trace_read_is_checked_once_at_its_first_run_and_the_answer_kept():
    """A guarded code's last guard asks once, the first time all its other guards hold: a cold compile
    reads then, and keeps what it read (a hook added later is not seen by either)."""
    from hatch_precompile.run.torch_internals.served import entry_graphs

    answers = iter([None, "a hook here"])
    asked, refused = [], []

    def first_run(frame_locals):
        asked.append(frame_locals)
        return next(answers)

    root = _Root()
    entry_graphs.Graphs({}, refused.append).last_guard(root, set(), first_run, refused.append, _Gate())
    (last,) = root.last
    assert last({"call": 1}) and last({"call": 2}) and asked == [{"call": 1}] and refused == []
    root = _Root()
    entry_graphs.Graphs({}, refused.append).last_guard(root, set(), lambda L: "a hook here", refused.append, _Gate())
    assert not root.last[0]({}) and not root.last[0]({}) and refused == ["a hook here"]  # said once, kept
    root = _Root()
    entry_graphs.Graphs({}, refused.append).last_guard(root, set(), lambda L: 1 / 0, refused.append, _Gate())
    assert not root.last[0]({}) and "cannot be checked here (ZeroDivisionError" in refused[-1]
    older = _OlderRoot()  # no last guards: asked with the other guards, at each call
    entry_graphs.Graphs({}, refused.append, at_install=True).last_guard(older, set(), first_run, refused.append, _Gate())
    assert older.each[0]({}) is False  # the second answer: a hook here


def test_torchs_controls_are_asked_at_every_call_and_a_reset_asks_the_first_run_again():
    """The last guard asks torch's compile controls at each call, before anything else: closed, the
    call is torch's, and nothing is asked or loaded. A first run's answer holds until torch's next
    reset, after which it is asked again, as a cold process traces again."""
    from hatch_precompile.run.torch_internals.served import entry_graphs

    answers = iter([None, "os.environ['X'] is set here", None])
    asked, refused, gate = [], [], _Gate()

    def first_run(frame_locals):
        asked.append(frame_locals)
        return next(answers)

    root = _Root()
    artifacts = {"__compiled_fn_1": _Artifact("eval")}
    entry_graphs.Graphs(artifacts, refused.append).last_guard(root, {"__compiled_fn_1"}, first_run, refused.append, gate)
    (last,) = root.last
    gate.open = False  # a stance under which torch runs the call eagerly: not asked, not loaded, not run
    assert not last({"call": 0}) and asked == [] and artifacts["__compiled_fn_1"].loads == 0 and gate.runs == 0
    gate.open = True
    assert last({"call": 1}) and last({"call": 2}) and asked == [{"call": 1}] and gate.runs == 1
    gate.resets = 1  # torch.compiler.reset(): asked again at the next call, and refused this time
    assert not last({"call": 3}) and not last({"call": 4}) and asked[1:] == [{"call": 3}]
    assert refused == ["os.environ['X'] is set here"] and gate.runs == 1
    gate.resets = 2
    assert last({"call": 5}) and gate.runs == 2 and artifacts["__compiled_fn_1"].loads == 1


def _record(level: int, message: str, *args: str) -> logging.LogRecord:
    return logging.LogRecord("torch._functorch._aot_autograd.autograd_cache", level, __file__, 1, message, args, None)


def test_why_an_entry_holds_no_graph_is_what_torch_said_and_torch_prints_no_more_than_before():
    saving = graph_saving.GraphSaving()
    saving.eager_backward = True
    assert saving.why() == "torch saved no compiled graph or no guard for it"
    serialize = _record(logging.WARNING, "AOTAutograd cache unable to serialize compiled graph: %s",
                        "pickle should not be called with after make_launchers()")
    assert saving._heard(serialize, logging.WARNING)  # a warning torch prints, printed
    assert not saving._heard(_record(logging.INFO, "Bypassing autograd cache due to: %s", "Unsupported call_function "
                                     "target foo"), logging.WARNING)  # read at INFO for this, not printed
    assert not saving._heard(_record(logging.INFO, "AOTAutograd cache hit for key %s", "abc"), logging.WARNING)
    assert saving._heard(serialize, logging.WARNING)  # said again: named once
    assert saving.why() == ("torch did not save its compiled graph (AOTAutograd cache unable to serialize compiled "
                            "graph: pickle should not be called with after make_launchers(); Bypassing autograd cache "
                            "due to: Unsupported call_function target foo)")
    lazy = graph_saving.GraphSaving()  # a torch that compiles each backward at its first backward() alone
    assert "call backward() on what it returns in the workload" in lazy.why()


def test_the_second_pass_compiles_each_backward_with_its_forward_and_ships_torchs_own_settings():
    from torch._functorch import config

    from hatch_precompile.run.torch_internals.served import compiler_settings

    before = compiler_settings.snapshot()
    saving = graph_saving.GraphSaving()
    saving.install()
    try:
        assert saving.eager_backward and config.force_non_lazy_backward_lowering
        # when a backward compiles, not what: the setting the pass makes is none a user's process is compared on
        assert compiler_settings.snapshot() == before
    finally:
        saving.settle()
    assert not config.force_non_lazy_backward_lowering and compiler_settings.snapshot() == before
