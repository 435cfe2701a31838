"""The index of served compiles (protocol/served_compiles.py) and the torch.compile wrapper's decisions
(run/served_compile.py), in-process: keys as torch makes them, objects told apart by what they are."""

from __future__ import annotations

import json
import types

import pytest
import torch
import torch.nn.functional as F

from hatch_precompile.errors import ServedError
from hatch_precompile.protocol import served_compiles
from hatch_precompile.run import served_compile


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
    function = served_compiles.Function("m", "f", 1, "dynamo/x.entry", ({"backend": "inductor"},), {})
    assert served_compiles.takes(function, {}) and served_compiles.takes(function, {"fullgraph": False})
    assert not served_compiles.takes(function, {"mode": "reduce-overhead"})


def outer(weight):
    def inner(x):
        return x * weight

    return inner


def test_an_object_is_told_apart_by_what_it_is():
    assert served_compiles.describe(F) == {"kind": "module", "name": "torch.nn.functional"}
    assert served_compiles.describe(torch.nn.Linear)["qualname"] == "Linear"
    builtin = served_compiles.describe(torch.flatten)
    assert builtin["kind"] == "builtin" and builtin["qualname"].endswith("flatten")
    assert served_compiles.describe(torch.ravel) != builtin
    layer_norm = served_compiles.describe(F.layer_norm)
    assert layer_norm["kind"] == "function" and layer_norm["code"] == served_compiles.code_digest(F.layer_norm.__code__)
    # A function of another code, or of the same code over other objects, is another one.
    assert served_compiles.describe(lambda x: x) != served_compiles.describe(lambda x: x + 1)
    assert served_compiles.describe(outer(2.0)) == served_compiles.describe(outer(2.0))
    assert served_compiles.describe(outer(2.0)) != served_compiles.describe(outer(3.0))
    assert served_compiles.describe(outer(torch.ones(2))) is None  # a tensor: no process can be held to it
    assert served_compiles.describe(Model()) is None


def test_a_dropped_guard_is_held_or_the_guarded_code_is_traced():
    held = served_compiles.dropped_guard("G['F'].gelu", "BUILTIN_MATCH", ("ID_MATCH",), True, F.gelu, True)
    assert held["source"] == "G['F'].gelu" and held["described"] == served_compiles.describe(F.gelu)
    closure = served_compiles.dropped_guard("G['F'].layer_norm", "CLOSURE_MATCH", (), True, F.layer_norm, True)
    assert closure["code"] and closure["described"] == {"kind": "code",
                                                        "code": served_compiles.code_digest(F.layer_norm.__code__)}
    assert "an object of the call's" in served_compiles.dropped_guard("L['model']", "ID_MATCH", (), False, Model(), True)
    assert "state" in served_compiles.dropped_guard("G['CONFIG']", "DICT_VERSION", (), True, {}, True)
    assert "no new process can tell" in served_compiles.dropped_guard("G['obj']", "ID_MATCH", (), True, Model(), True)
    assert "a path this version does not evaluate" in served_compiles.dropped_guard("G['f'](1)", "ID_MATCH", (), True,
                                                                                    plain, True)


def test_the_index_reads_back_and_refuses_what_it_cannot_serve():
    key = served_compiles.source_key("plain", 3)
    function = served_compiles.Function(__name__, "plain", 3, f"dynamo/{key}.entry", ({"dynamic": None},),
                                        {"a" * 64: [{"source": "G['F']", "type": "MODULE_MATCH", "code": False,
                                                     "described": {"kind": "module", "name": "F"}}],
                                         "b" * 64: "an object of the call's"})
    text = served_compiles.dumps("a settings digest", {key: function})
    assert served_compiles.parse(text) == ("a settings digest", {key: function})
    with pytest.raises(ServedError, match="compiler settings"):
        served_compiles.parse(json.dumps({**json.loads(text), "settings": None}))
    data = json.loads(text)
    with pytest.raises(ServedError, match="format"):
        served_compiles.parse(json.dumps({**data, "format": 99}))
    wrong = {**data, "functions": {"0" * 64: data["functions"][key]}}
    with pytest.raises(ServedError, match="not keyed by its name and line"):
        served_compiles.parse(json.dumps(wrong))
    evil = json.loads(text)
    evil["functions"][key]["guarded"]["a" * 64][0]["source"] = "G['os'].system('x')"
    with pytest.raises(ServedError, match="not one this version can hold"):
        served_compiles.parse(json.dumps(evil))


def test_only_the_packages_own_calls_are_wrapped_and_the_decorator_is_its_callers(monkeypatch):
    calls = []

    def original(model=None, **options):
        calls.append((model, options))
        return model

    monkeypatch.setattr(served_compile, "this_process", served_compile.ProcessState())
    served_compile.this_process.packages[__name__.rsplit(".", 1)[0]] = None  # this test module's package
    served = []
    monkeypatch.setattr(served_compile, "_served", lambda package, model, options, original_: served.append(
        (package, model, options)) or original_(model, **options))
    wrapped = served_compile._compile_wrapper(original)
    assert wrapped(plain, dynamic=True) is plain
    decorator = wrapped(mode="max-autotune")
    assert decorator(plain) is plain
    assert [s[0] for s in served] == ["unit", "unit"] and served[1][2] == {"mode": "max-autotune"}
    assert calls == [(plain, {"dynamic": True}), (plain, {"mode": "max-autotune"})]
    served_compile.this_process.packages.clear()  # another package's call: torch's, untouched
    assert wrapped(plain) is plain and len(served) == 2


def test_an_entry_whose_every_guarded_code_is_traced_is_not_installed(monkeypatch):
    from hatch_precompile.run.torch_internals import dynamo_cache

    monkeypatch.setattr(served_compile, "this_process", served_compile.ProcessState())
    served_compile.this_process.packages["unit"] = None  # never read: nothing is installed
    monkeypatch.setattr(dynamo_cache, "install", lambda *a, **k: pytest.fail("installed an entry no call can run"))
    why = "CLOSURE_MATCH guard on L['fn'] (an object of the call's)"
    function = served_compiles.Function("unit.m", "apply", 3, "dynamo/k.entry", ({},), {"a" * 64: why})
    served_compile._install("unit", plain, function)
    assert served_compile.served() == {"unit.m.apply": f"traced: {why}"}


def test_a_propertys_getter_is_named_as_torchs_install_finds_it():
    from torch._dynamo import package

    from hatch_precompile.build import dynamo_pass
    from hatch_precompile.run.torch_internals import patching

    getter = Model.loss_function.fget.__code__
    with pytest.raises(package.PackageError):  # torch's own lookup stops at the property
        package._get_code_source(getter)
    name, path = dynamo_pass._property_accessor({"code": getter})
    assert (name, path) == ("Model.loss_function", "fget.__code__")
    entry = types.SimpleNamespace(python_module=__name__, function_names=[name], code_source=path)
    assert package._lookup_code(entry) is getter  # what torch walks when it installs the entry
    for other in (plain.__code__, Model.forward.__code__, None, {}):
        assert dynamo_pass._property_accessor({"code": other}) is patching.PASS
    assert dynamo_pass._property_accessor({}) is patching.PASS  # torch's signature unread: torch answers
