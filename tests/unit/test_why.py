"""The logic of why-it-missed, verify's settings and load()'s visible checks: no torch needed."""

from __future__ import annotations

import pytest

from hatch_precompile.protocol.workloads import pack_keys, unpack_keys
from hatch_precompile.run.caches import foreseen_misses
from hatch_precompile.tools import verify, why

COMMON = {"torch_version": "<32 bytes sha256:aa>", "default_dtype": "torch.float32",
          "deterministic_algorithms_settings": "(False, False, True)", "inductor_config[size_asserts]": "True"}


def entry(compile_id, cache="aot", role="graph", key="a1", sources=None, **fields):
    return {"cache": cache, "role": role, "compile_id": compile_id, "key": key,
            "fields": {**COMMON, "gm": "<graph code: 8 lines, sha256:11>", **fields},
            "sources": sources or {}}


def test_pack_keeps_shared_fields_once_and_unpack_restores_every_entry():
    entries = [entry("0/0"), entry("0/0", cache="fx", role="forward", key="f1", gm="<graph code: 9>"),
               entry("1/0", key="a2", **{"example_inputs[0]": "float32[64]"})]
    packed = pack_keys(entries)
    assert packed["common"]["torch_version"] == COMMON["torch_version"] and "gm" not in packed["common"]
    assert all("torch_version" not in e["fields"] for e in packed["entries"])
    assert [e["fields"] for e in unpack_keys(packed)] == [e["fields"] for e in entries]
    assert pack_keys([]) is None


@pytest.mark.parametrize("bad", [None, [], {"entries": "x"}, {"entries": [1, {"fields": 3}]}, {"common": 5}])
def test_unpack_leaves_out_what_it_cannot_read(bad):
    assert unpack_keys(bad) == []


def test_explain_names_each_differing_field_with_both_values_and_what_sets_it():
    shipped = [entry("0/0"), entry("1/0", key="a9", gm="<graph code: 3 lines, sha256:99>")]
    here = [entry("0/0", key="a5", deterministic_algorithms_settings="(True, False, True)",
                  **{"inductor_config[size_asserts]": "False"})]
    found = why.explain(here, shipped, "0/0", ["0/0", "1/0"], "pkg")
    assert found["compared_with"] == "0/0" and not found["key_same"] and found["cache"] == "aot"
    assert [(f["field"], f["shipped"], f["here"]) for f in found["fields"]] == [
        ("deterministic_algorithms_settings", "(False, False, True)", "(True, False, True)"),
        ("inductor_config[size_asserts]", "True", "False"),
    ]
    assert "torch.use_deterministic_algorithms()" in found["fields"][0]["means"]
    assert found["fields"][1]["means"].startswith("torch._inductor.config.size_asserts")
    lines = why.summary(found)
    assert lines[0].startswith("deterministic_algorithms_settings: shipped (False, False, True), here (True")


def test_explain_names_the_function_whose_source_changed_by_its_place_in_the_package():
    built = {"/tmp/build-x/src/pkg/model.py:forward": {"line": 30, "sha256": "f1"},
             "/tmp/build-x/src/pkg/model.py:helper": {"line": 40, "sha256": "h1"}}
    installed = {"/venv/site-packages/pkg/model.py:forward": {"line": 30, "sha256": "f1"},
                 "/venv/site-packages/pkg/model.py:helper": {"line": 41, "sha256": "h2"}}
    shipped = [entry("0/0", sources=built)]
    here = [entry("0/0", key="a7", sources=installed, gm="<graph code: 9 lines, sha256:22>")]
    found = why.explain(here, shipped, "0/0", ["0/0"], "pkg")
    assert found["sources"] == [{"function": "helper", "file": "pkg/model.py", "change": "changed",
                                 "shipped_line": 40, "here_line": 41}]
    assert [f["field"] for f in found["fields"]] == ["gm"]
    assert why.summary(found)[0] == "the source of helper (pkg/model.py:41) changed since the build"


def test_explain_says_when_the_key_is_the_shipped_one_and_when_nothing_can_be_compared():
    same = why.explain([entry("2/0")], [entry("0/0")], "2/0", ["0/0"], "pkg")
    assert same["key_same"] and "torch did not use it" in why.summary(same)[0]
    assert why.explain([], [entry("0/0")], "2/0", ["0/0"], "pkg") is None
    assert why.explain([entry("2/0")], [entry("0/0")], "2/0", ["5/0"], "pkg") is None
    # No AOTAutograd key here (bypassed): the FX graph keys of the forward are compared.
    fx_here = [entry("2/0", cache="fx", role="forward", key="f2", default_dtype="torch.float64")]
    fx_built = [entry("0/0", cache="fx", role="forward", key="f1"), entry("0/0", cache="fx", role="backward")]
    found = why.explain(fx_here, fx_built, "2/0", ["0/0"], "pkg")
    assert found["cache"] == "fx" and [f["field"] for f in found["fields"]] == ["default_dtype"]


def test_a_shipped_key_torch_did_not_use_says_why_a_guard_a_file_or_no_entry_at_build():
    from hatch_precompile.protocol.workloads import Graph

    built = entry("0/0", key="a1")
    built["guards"] = [{"expr": "L['t0'] <= 16", "values": {"t0": 8}}]
    aot = "inductor/aotautograd/a1/entry"

    def unused(**kwargs):
        found = why.explain([entry("2/0", key="a1")], [built], "2/0", ["0/0"], "pkg", **kwargs)
        assert found["key_same"]
        return found["unused"], why.summary(found)

    # No entry under the key in the set: the build saved none. A graph Inductor had nothing to compile in...
    nothing = [Graph(compile_id="0/0", aot_misses=1, fx_hits=0, fx_misses=0)]
    kind, lines = unused(files=["inductor/fxgraph/b2/fb2x/entry"], graphs=nothing)
    assert kind == {"kind": "not_shipped", "nothing_compiled": True}
    assert "the build saved no entry under it: the graph has no operation for Inductor" in lines[0]
    # ... or one that it compiled (its backward never ran in the workload).
    kind, lines = unused(files=[], graphs=[Graph(compile_id="0/0", aot_misses=1, fx_misses=1)])
    assert kind == {"kind": "not_shipped", "nothing_compiled": False} and "never ran this graph's backward" in lines[0]
    # Shipped; its guard failed here: the expression, this process's values and the build's.
    failed = [{"compile_id": "2/0", "expr": "L['t0'] <= 16", "values": {"t0": 32}}]
    kind, lines = unused(files=[aot], failures=failed + [{"compile_id": "9/0", "expr": "x", "values": {}}])
    assert kind["kind"] == "guard" and lines == [
        "torch's key is the shipped entry's, but its guard failed here: L['t0'] <= 16 -- here t0 = 32, at build t0 = 8"]
    # Shipped; a file, or an FX graph entry it names, could not be loaded: which, and the error.
    bad = [{"compile_id": "2/0", "key": "a1", "file": "/c/aotautograd/a1/entry", "error": "EOFError: Ran out of input"}]
    kind, lines = unused(files=[aot], unloadable=bad)
    assert lines == ["torch's key is the shipped entry's, but its file (/c/aotautograd/a1/entry) could not be loaded "
                     "here: EOFError: Ran out of input"]
    fx = [{"compile_id": "2/0", "key": "a1", "fx_key": "fq7", "part": "bw", "error": "no FX graph entry under its key"}]
    kind, lines = unused(files=[aot], unloadable=fx)
    assert lines == ["torch's key is the shipped entry's, but the FX graph entry fq7 its bw graph names could not be "
                     "loaded here: no FX graph entry under its key"]
    kind, lines = unused(files=[aot], unloadable=[{"compile_id": "2/0", "key": "a1", "absent": True}])
    assert kind == {"kind": "absent"} and "no entry under it in this process's cache dir" in lines[0]
    kind, lines = unused(files=[aot])
    assert kind == {"kind": "unknown"} and "no guard failure was recorded" in lines[0]


def test_an_entry_that_cannot_be_loaded_is_named_with_the_error(tmp_path, monkeypatch):
    import uuid

    from hatch_precompile.child import unused_entries

    cache, key = tmp_path / "cache", f"a{uuid.uuid4().hex}"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    assert unused_entries.unloadable(key) == {"absent": True}
    (cache / "aotautograd" / key).mkdir(parents=True)
    (cache / "aotautograd" / key / "entry").write_bytes(b"not a pickle")
    found = unused_entries.unloadable(key)
    assert found["file"] == str(cache / "aotautograd" / key / "entry")
    assert found["error"].startswith("UnpicklingError")


@pytest.mark.parametrize("text, parsed", [
    ("deterministic", {"deterministic": True}),
    ("default-dtype=float64", {"default_dtype": "float64"}),
    ("matmul-precision=high", {"matmul_precision": "high"}),
    ("inductor.cpp.simdlen=256", {"config": ["inductor", "cpp.simdlen", "256"]}),
    ("functorch.donated_buffer=False", {"config": ["functorch", "donated_buffer", "False"]}),
    ("env.CI=true", {"env": ["CI", "true"]}),
])
def test_verify_settings_parse(text, parsed):
    assert verify.parse_setting(text) == parsed


@pytest.mark.parametrize("text", ["", "deterministic=1", "matmul-precision=tf32", "default-dtype=", "inductor.=1",
                                  "inductor.x", "env.1A=2", "threads=8"])
def test_verify_settings_refuse_what_they_cannot_apply_naming_the_forms(text):
    with pytest.raises(ValueError, match=r"--setting .* is not one of: deterministic, default-dtype=DTYPE"):
        verify.parse_setting(text)


def test_verify_replays_as_built_first_then_each_thread_count_and_setting_alone():
    assert verify.variants([1, 8], ["deterministic"]) == [
        ("as built", {}), ("threads=1", {"threads": 1}), ("threads=8", {"threads": 8}),
        ("deterministic", {"deterministic": True})]


def test_load_notes_variables_and_ci_it_can_see_without_importing_torch(monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    built = {"deterministic": False, "variables": {"TORCHINDUCTOR_FREEZING": "1"}}
    env = {"TORCHINDUCTOR_MAX_AUTOTUNE": "1", "TORCHINDUCTOR_CACHE_DIR": "/x", "CI": "true",
           "TORCHINDUCTOR_CPP_DYNAMIC_THREADS": "1"}
    notes = foreseen_misses.contradictions(built, "2.13.0+cpu", env)
    assert notes[0].startswith("TORCHINDUCTOR_FREEZING unset here and the graphs were compiled with "
                               "TORCHINDUCTOR_FREEZING=1")
    assert notes[1].startswith("TORCHINDUCTOR_MAX_AUTOTUNE=1 here and the graphs were compiled with it unset")
    assert notes[2].startswith("CI=true here, which from torch 2.11") and len(notes) == 3
    assert foreseen_misses.contradictions(built, "2.10.0", {"CI": "true", "TORCHINDUCTOR_FREEZING": "1"}) == []
    ci_kept = {"CI": "1", foreseen_misses.ALIASING_VAR: "0", "TORCHINDUCTOR_FREEZING": "1"}
    assert foreseen_misses.contradictions(built, "2.15.0", ci_kept) == []
    assert foreseen_misses.contradictions(None, "2.13.0", env) == []


def test_a_graph_is_explained_against_the_shipped_graphs_of_its_function_at_its_place():
    from hatch_precompile.protocol import Manifest

    def graph(compile_id, function, location):
        return {"compile_id": compile_id, "kind": "forward", "function": function, "location": location}

    manifest = Manifest.as_written({"package": "pkg", "env": {}, "files": {}, "keys": pack_keys([entry("0/0"), entry("1/0")]),
                                   "workloads": [{"name": "w", "graphs": [
                                       graph("0/0", "forward", "/tmp/build/src/pkg/model.py:30"),
                                       graph("1/0", "forward", "/tmp/build/src/pkg/other.py:30")]}]})
    here = graph("4/0", "forward", "/venv/site-packages/pkg/model.py:30")
    assert [g.compile_id for g in why.same_function_graphs(manifest, "forward", here["location"], "pkg")] == ["0/0"]
    found = why.explain_graph(here, [entry("4/0", key="a3", default_dtype="torch.float64")], [manifest], "pkg")
    assert found["compared_with"] == "0/0" and [f["field"] for f in found["fields"]] == ["default_dtype"]
    assert why.explain_graph({**here, "function": "other"}, [entry("4/0")], [manifest], "pkg") is None
    assert why.place("/elsewhere/model.py:3", "pkg") is None and why.place(None, "pkg") is None


def test_load_notes_only_variables_that_feed_torchs_keys(monkeypatch):
    """With the build's record of which variables feed the keys (child/key_variables.py, from torch's
    config), a variable whose entry the keys leave out is not noted: no false alarm."""
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    built = {"variables": {}, "key_variables": ["TORCHINDUCTOR_MAX_AUTOTUNE"]}
    assert foreseen_misses.contradictions(built, "2.13.0+cpu", {"TORCHINDUCTOR_COMPILE_THREADS": "1"}) == []
    (note,) = foreseen_misses.contradictions(built, "2.13.0+cpu", {"TORCHINDUCTOR_MAX_AUTOTUNE": "1"})
    assert note == ("TORCHINDUCTOR_MAX_AUTOTUNE=1 here and the graphs were compiled with it unset: torch's cache "
                    "keys hold the setting it makes, so every graph will compile again")


def test_the_variables_in_torchs_keys_are_read_from_its_config():
    from hatch_precompile.child import key_variables

    found = key_variables.variables_in_keys()
    assert "TORCHINDUCTOR_MAX_AUTOTUNE" in found["key"] and "TORCHINDUCTOR_COMPILE_THREADS" in found["ignored"]
    assert found["key"]["TORCHINDUCTOR_CPP_DYNAMIC_THREADS"] == ["inductor.cpp.dynamic_threads"]
    assert "TORCHINDUCTOR_CACHE_DIR" not in found["key"]  # read where the cache is, into no setting


def test_verify_lists_each_served_function_once_and_a_traced_one_is_its_miss():
    result = {"load": {"loaded": True, "reason": "installed", "installed": 3}, "kernels_installed": 2,
              "workloads": [{"name": "w", "seconds": 1.0, "kernels_compiled": 0, "graphs": [],
                             "counters": {"aot_autograd": {}, "inductor": {}}}],
              "served": {"pkg.model.loss": "served: 1 guarded code(s)",
                         "pkg.model.head": "traced: compiled with other options than the build's"},
              "steps": [], "unknown": [],
              "misses": ["compiled function pkg.model.head was shipped as a Dynamo cache entry, and traced: ..."]}
    lines = verify.render("pkg", result).splitlines()
    assert lines.count("  compiled function pkg.model.loss: served: 1 guarded code(s)") == 1
    assert lines.count("  compiled function pkg.model.head: traced: compiled with other options than the build's") == 1
    assert lines[-1].startswith("FAILED: 1 miss(es)")
