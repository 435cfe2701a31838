"""Kernel names across install paths: our mirror of Inductor's hash, and the command line's template."""

from __future__ import annotations

import pytest

from hatch_precompile.run.caches import relocate


def test_code_key_mirrors_inductor():
    codecache = pytest.importorskip("torch._inductor.codecache")
    for source, extra in [("  int x;\n", "g++ -I/a/torch/include -O3"), ("int y;", "")]:
        assert relocate.code_key(source, extra) == codecache.get_hash(source.strip(), extra)


def test_template_round_trip():
    values = {relocate.TORCH_DIR: "/v/site-packages/torch", relocate.PY_INCLUDE: "/py/include/python3.11",
              relocate.PY_INCLUDE_POSIX: "/py/include/python3.11"}
    command = "g++ -I/py/include/python3.11 -I/v/site-packages/torch/include -I/v/site-packages/torch/include/api"
    template = relocate.to_template(command, values)
    assert "/v/" not in template and "/py/" not in template
    moved = dict(values, **{relocate.TORCH_DIR: "/w/torch"})
    assert relocate.render(template, moved) == command.replace("/v/site-packages/torch", "/w/torch")
