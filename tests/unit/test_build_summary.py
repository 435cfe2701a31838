"""What a build says, in this process: the reporter's wording, the per-set lines and the
``graph-breaks``/``recompiles`` checks, on made-up manifests (real builds: test_build.py,
test_build_errors.py)."""

from __future__ import annotations

import pytest

from hatch_precompile.builder import build_summary, options
from hatch_precompile.builder.reporter import Reporter, worded
from hatch_precompile.errors import Instability
from hatch_precompile.protocol import FileEntry, Manifest

BREAK = {"location": "/src/mypkg/model.py:12", "reason": "Tensor.item() call"}


def heard() -> tuple[Reporter, list[tuple[str, str]]]:
    said: list[tuple[str, str]] = []
    return Reporter(lambda text: said.append(("info", text)), lambda text: said.append(("warning", text))), said


def test_the_reporter_words_each_prefix_once_and_keeps_a_line_as_it_is():
    reporter, said = heard()
    reporter.info("built")
    reporter.warning("a kernel is not shipped")
    reporter.notice("failed", "install it")
    reporter.line("  | a line of the child's")
    assert said == [("info", "precompile: built"), ("warning", "precompile: warning: a kernel is not shipped"),
                    ("warning", "precompile: failed\nprecompile: install it"), ("info", "  | a line of the child's")]
    assert worded("one", "two") == "precompile: one\nprecompile: two"


def manifest(**env: str) -> Manifest:
    env = {"torch": "2.13.0", "python": "3.11", "cpu_capability": "AVX2", **env}
    return Manifest("mypkg", env, {"inductor/x": FileEntry(2_000_000, "0" * 64)}, timings={"total_seconds": 4.25},
                    workloads=[{"name": "mypkg.precompile:workload", "graph_breaks": [BREAK]}])


def test_each_set_gets_its_lines_and_several_sets_their_shared_size():
    reporter, said = heard()
    build_summary.report([manifest(), manifest(cpu_capability="AVX512")], 3_000_000, reporter)
    lines = [text for _, text in said]
    assert lines[0] == ("precompile: captured 0 compiled graph(s), 0 kernel binaries, 0 TorchScript module(s); "
                        "1 files, 2.00 MB, in 4.2 s; 1 graph break(s)")
    assert lines[1] == "precompile: artifacts are used only with torch 2.13.0, Python 3.11, CPU capability AVX2"
    assert lines[-1] == "precompile: 2 artifact sets in 3.00 MB (4.00 MB if each stored its own copy of the files they share)"


@pytest.mark.parametrize("level", ["off", "warn", "error"])
def test_a_graph_break_is_passed_noted_or_an_instability_as_the_option_says(level):
    reporter, said = heard()
    opts = options.parse({"workload": "mypkg.precompile:workload", "graph-breaks": level}, "precompile")
    message = (f'the workload shows 1 graph break(s) (`graph-breaks = "{level}"`):\n  mypkg.precompile:workload: '
               "/src/mypkg/model.py:12: a tensor turned into a Python number (.item()) (Tensor.item() call); fix: keep "
               "the value a tensor (torch.where, tensor arithmetic), or set torch._dynamo.config.capture_scalar_outputs "
               "= True")
    if level == "error":
        with pytest.raises(Instability) as raised:
            build_summary.check_instabilities([manifest()], opts, reporter)
        assert str(raised.value) == message and not said
    else:
        build_summary.check_instabilities([manifest()], opts, reporter)
        assert said == ([] if level == "off" else [("warning", f"precompile: {message}")])
