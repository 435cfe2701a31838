"""Torch's compile controls as a shipped guarded code's gate reads them, on the suite's own torch: the
stance, the recompile limit, torch's own compiled codes, and resets (run/torch_internals/served/
compile_controls.py). A shipped code that has not run since the process started (or torch's last
reset) is a compile still to be made; one that has is one of the frame's compiled codes."""

from __future__ import annotations

import types

import pytest
import torch

from hatch_precompile.run.torch_internals import patching
from hatch_precompile.run.torch_internals.served import compile_controls


def scaled(x):
    return x * 2


def other(x):
    return x + 1


@pytest.fixture
def gates(monkeypatch):
    """Gates over fresh bookkeeping, with torch's resets followed and its counts added to."""
    monkeypatch.setattr(compile_controls, "_ran", {})
    monkeypatch.setattr(compile_controls, "_generation", [0])
    compile_controls.watch()
    torch._dynamo.reset()
    said: list[str] = []

    def gate(fn=scaled, limits=(None,)):
        return compile_controls.Gate(fn.__code__, limits, said.append)

    yield gate, said
    torch.compiler.set_stance("default")
    torch._dynamo.reset()


def test_under_the_default_stance_a_first_run_is_allowed_and_then_counts_as_compiled(gates):
    gate, said = gates
    shipped = gate()
    assert not shipped.ran() and shipped.allows({"x": torch.ones(2)})
    shipped.has_run()
    assert shipped.ran() and shipped.allows({"x": torch.ones(2)}) and said == []


@pytest.mark.parametrize("stance, says", [
    ("eager_then_compile", "runs a frame's first call eagerly and compiles the next (traced)"),
    ("aot_eager_then_compile", "compiles a frame's first call with aot_eager (traced)"),
    ("eager_on_recompile", "runs a call no compiled code serves eagerly"),
    ("fail_on_recompile", "raises at a call no compiled code serves"),
])
def test_a_stance_that_compiles_nothing_now_runs_only_what_has_run(gates, stance, says):
    gate, said = gates
    fresh, warm = gate(), gate(other)
    warm.has_run()
    torch.compiler.set_stance(stance)
    assert warm.allows({}) and not fresh.allows({})
    assert said == [f"under torch.compiler.set_stance({stance!r}) torch {says}; this guarded code had not run since "
                    "torch's last reset"]


def test_guards_skipped_unsafely_compile_nothing_either(gates):
    gate, said = gates
    fresh, warm = gate(), gate(other)
    warm.has_run()
    torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)
    assert warm.allows({}) and not fresh.allows({}) and "skip_guard_eval_unsafe=True) torch raises" in said[0]


def test_a_forced_backend_runs_no_shipped_code(gates):
    gate, said = gates
    warm = gate()
    warm.has_run()
    torch.compiler.set_stance("default", force_backend="eager")
    assert not warm.allows({})
    assert said == ["torch.compiler.set_stance(force_backend='eager') compiles with another backend than the build's "
                    "(traced)"]


def test_the_recompile_limit_counts_the_shipped_codes_that_have_run_and_torch_counts_them_too(gates):
    gate, said = gates
    first, second = gate(), gate()  # two guarded codes of one frame: two batch sizes
    first.has_run()
    with torch._dynamo.config.patch(recompile_limit=1):
        assert not second.allows({})
        assert gate(limits=(2,)).allows({})  # the package's compile's own limit, where it gave one
    assert said == ["the recompile limit (1) is reached: this frame holds 1 compiled code(s), and torch runs the call "
                    "eagerly"]
    # torch's own count of the frame's compiled codes holds the one that ran: its limit is reached too
    from torch._dynamo import convert_frame

    frame = types.SimpleNamespace(f_code=scaled.__code__, f_locals={})
    size = convert_frame.compute_cache_size(frame, [], 0)
    assert (size.num_cache_entries, size.num_cache_entries_with_same_id_matched_objs) == (1, 1)
    assert size.will_compilation_exceed_specific_limit(1)
    with torch._dynamo.config.patch(error_on_recompile=True):
        assert not second.allows({}) and said[-1].startswith("torch._dynamo.config.error_on_recompile")


def test_torchs_own_compiled_codes_count_and_one_that_serves_the_call_keeps_it(gates):
    gate, said = gates
    compiled = torch.compile(scaled, backend="eager", dynamic=False)
    compiled(torch.ones(3))  # torch's own compiled code of the frame, for a batch of 3
    shipped = gate()
    assert not shipped.allows({"x": torch.ones(3)}) and said == []  # torch's serves it, as in a cold process
    assert shipped.allows({"x": torch.ones(5)})
    with torch._dynamo.config.patch(recompile_limit=1):
        assert not shipped.allows({"x": torch.ones(5)}) and "holds 1 compiled code(s)" in said[-1]


def test_a_reset_drops_what_has_run(gates):
    gate, said = gates
    shipped = gate()
    shipped.has_run()
    generation = shipped.generation()
    torch.compiler.reset()
    assert not shipped.ran() and shipped.generation() == generation + 1
    shipped.has_run()
    torch._dynamo.reset_code_caches()
    assert not shipped.ran()
    torch.compiler.set_stance("eager_on_recompile")
    assert not shipped.allows({}) and said[-1].endswith("had not run since torch's last reset")


def test_a_control_that_cannot_be_read_leaves_the_call_to_torch(gates, monkeypatch):
    from torch._dynamo import eval_frame

    gate, said = gates
    shipped = gate()
    monkeypatch.setattr(eval_frame, "_stance", object())
    assert not shipped.allows({}) and said[-1].startswith("torch's compile controls cannot be read here (")
    monkeypatch.undo()
    with torch._dynamo.config.patch(recompile_limit=8.0):
        assert not gate().allows({}) and "recompile limits of another type" in said[-1]


def test_watching_says_which_control_cannot_be_followed(monkeypatch):
    compile_controls.watch()
    assert compile_controls.watching() is None
    monkeypatch.setattr(patching, "wrapped", lambda name: name != "code-caches-reset")
    assert compile_controls.watching() == "torch's resets cannot be followed here (torch moved)"
    monkeypatch.setattr(patching, "wrapped", lambda name: name != "cache-size")
    assert compile_controls.watching() == "torch's recompile limit cannot be followed here (torch moved)"
