"""What the tools conclude from what was observed, in this process: snoop's gaps and hints, the
pitfall finder, and merge's checks, on made-up records and wheels (the same on real programs and
builds: test_snoop.py, test_fleet.py)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import stat
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from hatch_precompile.child import observe, performance_pitfalls
from hatch_precompile.errors import MergeError
from hatch_precompile.protocol import FileEntry, Manifest, sha256
from hatch_precompile.protocol.workloads import Graph, Workload
from hatch_precompile.tools import merge, snoop, wheelfile

IMAGES = {"name": "images", "dtype": "torch.float32", "requires_grad": False}


def graph(function="forward", location="/site/mypkg/model.py:30", hits=0, misses=1, shape=(32, 1, 28, 28),
          grad=True, kind="forward", seconds=4.0, distribution="mypkg", dtype="torch.float32", compile_id="0/0"):
    return {"function": function, "location": location, "compile_id": compile_id, "kind": kind, "seconds": seconds,
            "aot_hits": hits, "aot_misses": misses, "fx_hits": 0, "fx_misses": 0, "distribution": distribution,
            "inputs": [dict(IMAGES, shape=list(shape), dtype=dtype)], "grad_mode": grad, "recompile_reason": None}


def shipped(*graphs: Graph) -> list[Manifest]:
    return [Manifest("mypkg", {}, {}, workloads=[Workload("mypkg.precompile:workload", graphs=list(graphs))])]


def built(shape=(32, 1, 28, 28), grad=True, dtype="torch.float32", location="/build/src/mypkg/model.py:30") -> Graph:
    return Graph(compile_id="0/0", function="forward", location=location,
                 inputs=[dict(IMAGES, shape=list(shape), dtype=dtype)], grad_mode=grad)


def analyse(graphs, manifests, loaded=True):
    result = {"command": ["python", "train.py"], "exit_code": 0, "fresh_cache": True, "graphs": graphs,
              "loads": [{"distribution": "mypkg", "package": "mypkg", "loaded": loaded, "reason": "installed"}]}
    return snoop.analyse(result, 0.0, lambda package: manifests)


# -- snoop: coverage and gaps ----------------------------------------------------------------------


def test_graphs_served_by_the_shipped_artifacts_count_as_coverage():
    report = analyse([graph(hits=1, misses=0), graph(kind="backward", hits=1, misses=0, seconds=1.0),
                      graph(function="other", distribution="torchvision", seconds=9.0)], shipped(built()))
    assert report["graphs"][0]["distribution"] == "torchvision"  # largest first
    parcel = report["distributions"]["mypkg"]
    assert parcel["coverage"] == 1.0 and parcel["compiled_seconds"] == 0 and parcel["cached_seconds"] == 5.0
    assert "coverage" not in report["distributions"]["torchvision"]  # not a hatch-precompile package
    assert report["gaps"] == []


@pytest.mark.parametrize(
    ("call", "artifacts", "hint"),
    [
        (graph(shape=(64, 1, 28, 28)), [built()],
         "the workload calls forward with images of shape [32, 1, 28, 28] only; this program used [64, 1, 28, 28]"),
        (graph(dtype="torch.float64"), [built()], "the workload calls forward with images as torch.float32; this "
                                                  "program used torch.float64"),
        (graph(grad=False), [built(grad=True)], "the workload never calls forward under torch.no_grad()"),
        (graph(), [built(shape=("s0", 1, 28, 28))], "the artifacts hold forward with images dim 0 dynamic"),
        (graph(), [], "the workload never compiles forward: add a call to it"),
        (graph(), [built()], "compiled fresh although the workload makes one like it"),
    ],
    ids=["shape", "dtype", "grad mode", "dynamic dim", "never compiled", "same call"],
)
def test_each_gap_gets_the_hint_for_its_difference(call, artifacts, hint):
    (gap,) = analyse([call], shipped(*artifacts))["gaps"]
    assert hint in gap["hint"], gap["hint"]
    assert gap["signature"]["inputs"] == call["inputs"] and len(gap["shipped"]) == len(artifacts)


def test_a_backward_or_another_distributions_graph_is_no_gap():
    report = analyse([graph(kind="backward"), graph(distribution="torchvision")], shipped(built()))
    assert report["gaps"] == []


def test_the_same_function_elsewhere_is_not_the_shipped_one():
    # forward in another module of the package is another function, whatever its name.
    (gap,) = analyse([graph(location="/site/mypkg/other.py:9")], shipped(built()))["gaps"]
    assert gap["shipped"] == [] and "never compiles forward" in gap["hint"]


def test_signatures_read_as_users_write_them():
    assert snoop.signature({"inputs": [dict(IMAGES, shape=[64, 1], requires_grad=True)], "grad_mode": False}) == (
        "images f32[64, 1] requires_grad (no_grad)")
    assert snoop.signature({"inputs": None, "grad_mode": True}) == "(inputs not recorded)"


# -- pitfalls --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "what"),
    [("Tensor.item() call", ".item()"), ("Unsupported: builtin `print`", "print()"),
     ("Data-dependent branching", "control flow"), ("something new", "a graph break")],
)
def test_graph_breaks_are_named_with_a_fix(reason, what):
    found, fix = performance_pitfalls.graph_break(reason)
    assert what in found and fix


@pytest.mark.parametrize(
    ("reason", "what"),
    [("tensor 'L['x']' size mismatch at index 0. expected 32, actual 64", "shape changed"),
     ("tensor 'L['x']' dtype mismatch", "dtype changed"), ("L['lr'] == 0.1", "Python scalar"),
     ("tensor 'L['x']' rank mismatch", "number of dims")],
)
def test_unstable_recompiles_are_named_with_a_fix(reason, what):
    found = performance_pitfalls.instability(reason)
    assert found is not None and what in found[0] and found[1]


def test_the_grad_mode_recompile_is_expected():
    assert performance_pitfalls.instability("0/0: GLOBAL_STATE changed: grad_mode") is None
    lines = performance_pitfalls.of_workload([], [{"function": "f", "location": "m.py:3", "reasons": ["GLOBAL_STATE changed: grad_mode"]}])
    assert lines == {"graph-breaks": [], "recompiles": []}


def test_every_pitfall_of_a_program_is_found_where_it_happens():
    result = {"float64": [{"location": "m.py:5", "function": "f", "nodes": 3, "ops": ["aten.add"]}],
              "graph_breaks": [{"location": "m.py:7", "reason": "Tensor.item() call"}],
              "recompiles": [{"function": "f", "location": "m.py:1", "reasons": ["size mismatch at index 0"]}]}
    found = performance_pitfalls.find(result, [graph(dtype="torch.float64")])
    kinds = [(p["kind"], p["location"]) for p in found]
    assert kinds == [("float64 in a compiled graph", "m.py:5"), ("float64 input", "/site/mypkg/model.py:30"),
                     ("graph break", "m.py:7"), ("recompile", "m.py:1")]
    assert all(p["fix"] for p in found)


def test_a_restarted_trace_is_a_pitfall_with_the_seconds_every_start_pays():
    restarted = dict(graph(), restart_seconds=1.5, restart_reasons=["'skip function graph_break in file ...'"])
    (found,) = performance_pitfalls.find({}, [graph(), restarted])
    assert found["kind"] == "restarted trace" and found["location"] == "/site/mypkg/model.py:30"
    assert found["what"] == ("forward: 1.50 s of Dynamo tracing thrown away by a restart, at every start, warm ones "
                             "too ('skip function graph_break in file ...')")
    assert "graph break" in found["fix"]


def test_the_restart_seconds_are_read_from_torchs_metrics_and_default_where_torch_has_none():
    common = dict(compile_id="0/0", co_name="forward", co_filename="/site/m.py", co_firstlineno=3,
                  entire_frame_compile_time_s=2.0, graph_op_count=5, is_forward=True)
    with_restart = SimpleNamespace(**common, dynamo_time_before_restart_s=0.4567, restart_reasons={"b", "a"})
    utils = SimpleNamespace(get_compilation_metrics=lambda: [with_restart, SimpleNamespace(**common)])
    first, older_torch = observe.compiled_graphs(utils)
    assert (first["restart_seconds"], first["restart_reasons"]) == (0.457, ["a", "b"])
    assert (older_torch["restart_seconds"], older_torch["restart_reasons"]) == (0.0, [])
    assert Graph(**first).restart_seconds == 0.457  # the manifest's record carries it


# -- merge -----------------------------------------------------------------------------------------


def make_wheel(path: Path, files: dict[str, bytes], name: str = "mypkg-1.0-cp311-cp311-linux_x86_64.whl",
               modes: dict[str, int] | None = None) -> Path:
    """A wheel of ``files``, each a plain file of ``modes``' mode (0644 unless named there)."""
    path.mkdir(parents=True, exist_ok=True)
    wheel = path / name
    record = "mypkg-1.0.dist-info/RECORD"
    with zipfile.ZipFile(wheel, "w") as archive:
        for member, data in files.items():
            info = zipfile.ZipInfo(member)
            info.external_attr = (stat.S_IFREG | (modes or {}).get(member, 0o644)) << 16
            archive.writestr(info, data)
        archive.writestr(record, "")
    return wheel


def artifact_set(name: str, blob: bytes) -> dict[str, bytes]:
    manifest = Manifest("mypkg", {"cpu_capability": name}, {"inductor/x": FileEntry(len(blob), sha256(blob))})
    return {f"mypkg/_precompiled/sets/{name}/manifest.json": manifest.dumps().encode(),
            f"mypkg/_precompiled/blobs/{sha256(blob)}": blob}


CODE = {"mypkg/__init__.py": b"import hatch_precompile\n", "mypkg-1.0.dist-info/WHEEL": b"Tag: cp311-cp311-linux_x86_64\n"}


def test_merge_unites_the_sets_stores_each_blob_once_and_writes_a_true_record(tmp_path):
    shared = b"the same bytes on both machines"
    a = make_wheel(tmp_path / "a", {**CODE, **artifact_set("avx2-1", shared)})
    b = make_wheel(tmp_path / "b", {**CODE, **artifact_set("default-2", shared), **artifact_set("avx512-3", b"x")})
    merged, sets = merge.merge([a, b], tmp_path / "out")
    assert sorted(sets) == ["avx2-1", "avx512-3", "default-2"] and merged.name == a.name
    with zipfile.ZipFile(merged) as archive:
        names = archive.namelist()
        rows = {row[0]: row[1:] for row in csv.reader(io.StringIO(archive.read("mypkg-1.0.dist-info/RECORD").decode()))}
        assert names.count(f"mypkg/_precompiled/blobs/{sha256(shared)}") == 1
        assert set(rows) == set(names)
        for name in names:
            if not name.endswith("RECORD"):
                digest = base64.urlsafe_b64encode(hashlib.sha256(archive.read(name)).digest()).rstrip(b"=").decode()
                assert rows[name] == [f"sha256={digest}", str(len(archive.read(name)))]


def test_merge_keeps_every_members_mode_and_a_comma_in_a_name(tmp_path):
    tool = "mypkg/bin/tool,v1.sh"
    code = {**CODE, tool: b"#!/bin/sh\necho ok\n"}
    a = make_wheel(tmp_path / "a", {**code, **artifact_set("avx2-1", b"a")}, modes={tool: 0o755})
    b = make_wheel(tmp_path / "b", {**code, **artifact_set("default-2", b"b")}, modes={tool: 0o755})
    merged, _ = merge.merge([a, b], tmp_path / "out")
    modes = wheelfile.read_modes(merged)
    assert modes[tool] >> 16 == stat.S_IFREG | 0o755 and modes["mypkg/__init__.py"] >> 16 == stat.S_IFREG | 0o644
    contents = wheelfile.read_wheel(merged)
    assert wheelfile.record_problem(contents, "mypkg-1.0.dist-info/RECORD") is None
    rows = list(csv.reader(io.StringIO(contents["mypkg-1.0.dist-info/RECORD"].decode())))
    assert all(len(row) == 3 for row in rows) and tool in [row[0] for row in rows]
    wheelfile.unpack(merged, tmp_path / "site")
    assert stat.S_IMODE((tmp_path / "site" / tool).stat().st_mode) == 0o755
    plain = make_wheel(tmp_path / "plain", {**code, **artifact_set("avx512-3", b"c")})
    with pytest.raises(MergeError, match=r"mypkg/bin/tool,v1.sh has mode 0644 in .*plain.* and 0755 in "):
        merge.merge([a, plain], tmp_path / "out2")


def test_merge_of_wheels_for_two_glibcs_installs_only_where_both_sets_load(tmp_path):
    """A set whose kernels call a newer glibc (expf@GLIBC_2.27, say) tags its wheel higher."""
    def wheel(name: str, platform: str, generator: bytes = b"") -> Path:
        files = {**CODE, "mypkg-1.0.dist-info/WHEEL": generator + f"Tag: cp311-cp311-{platform}\n".encode()}
        return make_wheel(tmp_path / name, {**files, **artifact_set(name, name.encode())},
                          name=f"mypkg-1.0-cp311-cp311-{platform}.whl")

    old, new = wheel("old", "manylinux_2_24_x86_64"), wheel("new", "manylinux_2_27_x86_64")
    merged, _ = merge.merge([old, new], tmp_path / "out")
    assert merged.name == "mypkg-1.0-cp311-cp311-manylinux_2_27_x86_64.whl"
    with zipfile.ZipFile(merged) as archive:
        assert archive.read("mypkg-1.0.dist-info/WHEEL").decode().splitlines() == [
            "Tag: cp311-cp311-manylinux_2_27_x86_64"
        ]
    other = wheel("other", "manylinux_2_17_x86_64", generator=b"Generator: another\n")
    with pytest.raises(MergeError, match="WHEEL differs between"):
        merge.merge([old, other], tmp_path / "out2")
    abi3 = make_wheel(tmp_path / "abi3", {**CODE, **artifact_set("c", b"c")}, name="mypkg-1.0-cp311-abi3-linux_x86_64.whl")
    with pytest.raises(MergeError, match="must be one project, version, Python and ABI"):
        merge.merge([old, abi3], tmp_path / "out3")


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ({**CODE, "mypkg/__init__.py": b"changed\n", **artifact_set("b", b"y")},
         "mypkg/__init__.py differs between"),
        ({**CODE, "mypkg/extra.py": b"", **artifact_set("b", b"y")}, "mypkg/extra.py is only in"),
        ({**CODE, **artifact_set("a", b"other bytes")}, "differs from the same set in"),
        (CODE, None),  # no set at all: still merges the first's
    ],
    ids=["code differs", "a file more", "same set, other bytes", "no set"],
)
def test_merge_refuses_wheels_that_differ_outside_their_sets(tmp_path, second, message):
    a = make_wheel(tmp_path / "a", {**CODE, **artifact_set("a", b"x")})
    b = make_wheel(tmp_path / "b", second)
    if message is None:
        assert merge.merge([a, b], tmp_path / "out")[1] == ["a"]
        return
    with pytest.raises(MergeError, match=message):
        merge.merge([a, b], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_merge_checks_every_listed_blob_and_the_names(tmp_path):
    broken = artifact_set("a", b"x")
    broken[next(k for k in broken if "/blobs/" in k)] = b"altered"
    a = make_wheel(tmp_path / "a", {**CODE, **broken})
    b = make_wheel(tmp_path / "b", {**CODE, **artifact_set("b", b"y")})
    with pytest.raises(MergeError, match="whose blob is missing or altered"):
        merge.merge([a, b], tmp_path / "out")
    other = make_wheel(tmp_path / "c", CODE, name="mypkg-2.0-cp311-cp311-linux_x86_64.whl")
    with pytest.raises(MergeError, match="must be one project, version, Python and ABI"):
        merge.merge([b, other], tmp_path / "out")
    with pytest.raises(MergeError, match="give two wheels or more"):
        merge.merge([b], tmp_path / "out")
    empty = make_wheel(tmp_path / "d", CODE)
    with pytest.raises(MergeError, match="hold no artifact set"):
        merge.merge([empty, empty], tmp_path / "out")
