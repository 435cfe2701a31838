"""The contract's schemas: safe paths, the manifest read through its fields, and its generated docs."""

from __future__ import annotations

from pathlib import Path

import pytest

from hatch_precompile import protocol
from hatch_precompile.errors import ManifestError
from hatch_precompile.protocol import Manifest, workloads
from hatch_precompile.protocol import manifest as manifest_schema

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference"


@pytest.mark.parametrize(
    "path",
    ["../x", "a/../../x", "/etc/passwd", "a//b", "./a", "a\\b", "", "a/", None, 3, "C:/x", "c:x", "a:stream",
     "x/.hidden", "NUL", "x/com1.txt", "a\x00b", "x/" + "y" * 300],
)
def test_unsafe_manifest_paths(path):
    assert not protocol.is_safe_relpath(path)


def test_manifest_rejects_escaping_paths_and_unknown_format():
    good = b'{"format": 3, "env": {}, "files": {"inductor/a/b": {"size": 1, "sha256": "' + b'0' * 64 + b'"}}}'
    assert Manifest.parse(good).files
    with pytest.raises(ManifestError, match="outside its directory"):
        Manifest.parse(good.replace(b"inductor/a/b", b"../../b"))
    with pytest.raises(ManifestError, match="format 4 is not the supported format 3"):
        Manifest.parse(good.replace(b'"format": 3', b'"format": 4'))
    with pytest.raises(ManifestError, match="lacks size or sha256"):
        Manifest.parse(good.replace(b'"size": 1, ', b""))


def test_the_manifest_is_frozen_once_built():
    manifest = Manifest.parse(b'{"format": 3, "env": {}, "files": {}}')
    with pytest.raises(AttributeError):
        manifest.warmed = {"at": "now"}  # type: ignore[misc]


def test_report_only_parts_are_kept_as_written_for_the_tools():
    data = {"format": 3, "env": {}, "files": {}, "workloads": [{"name": "w", "graphs": [{"compile_id": "0/0",
            "unknown_field": 1}]}, "not a workload"], "keys": {"entries": []}}
    manifest = Manifest.from_data(data)
    assert manifest.workloads == [data["workloads"][0]] and manifest.keys == {"entries": []}
    (workload,) = workloads.of(manifest)
    assert workload.name == "w" and workload.graphs[0].compile_id == "0/0"


def test_a_refused_manifest_is_still_shown_as_written():
    shown = Manifest.as_written({"format": 2, "package": "p", "env": {"torch": "2.7.1"}, "cpu_target": "skylake"})
    assert shown.package == "p" and shown.env == {"torch": "2.7.1"} and shown.cpu_target is None


def test_docs_manifest_md_is_generated_from_the_fields():
    """docs/reference/manifest.md holds the table the dataclass makes; regenerate it with
    `python -c "from hatch_precompile.protocol import manifest; print(manifest.documentation())"`."""
    assert manifest_schema.documentation() in (DOCS / "manifest.md").read_text()


def test_a_step_contract_of_another_format_or_route_is_refused_by_name():
    from hatch_precompile.errors import ContractError
    from hatch_precompile.protocol.step_file import CONTRACT_FORMAT, read_contract

    good = {"format": CONTRACT_FORMAT, "route": "aotinductor", "torch": "2.13.0", "export": {}}
    assert read_contract(good, "serve") is good
    for record, says in (
        ({**good, "format": 1}, "step 'serve' has a contract of format 1; this hatch-precompile serves format 2 "
                                "(build the package again)"),
        ({**good, "route": "jit"}, "step 'serve' has a contract for the route 'jit', not one of aotinductor, precompile"),
        ({k: v for k, v in good.items() if k != "export"}, "step 'serve''s contract lacks export"),
        ({**good, "export": []}, "step 'serve''s contract has an `export` that is not a JSON object"),
        ([], "step 'serve' has a contract that is not a JSON object"),
    ):
        with pytest.raises(ContractError) as raised:
            read_contract(record, "serve")
        assert str(raised.value) == says
