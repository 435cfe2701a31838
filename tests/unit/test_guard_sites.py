"""Identity guards deepcopy's memo made (builder/served/guard_sites.py), held by how their objects alias
(run/served/held_objects.py): on guards Dynamo really makes, in-process with the eager backend."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
import traceback
from pathlib import Path

import torch

from hatch_precompile.builder.served import guard_sites
from hatch_precompile.protocol import dynamo_sources
from hatch_precompile.run.served import held_objects

MISBEHAVE = Path(__file__).resolve().parents[1] / "misbehave"


@dataclasses.dataclass
class Options:
    weights: list = dataclasses.field(default_factory=lambda: [1.0, 2.0])
    shifts: list = dataclasses.field(default_factory=lambda: [1.0, 2.0])


def copied(x, options):
    made = copy.deepcopy(options)
    made.weights[0] = 3.0
    return x * made.weights[0] + made.shifts[0]


def identified(x, options):
    return x + (id(options) > 0)  # the package's own id(): an identity no process can have again


def identity_guards(fn, *args):
    """Each ID_MATCH guard Dynamo made tracing ``fn(*args)``: (source, made by the memo)."""
    seen = []

    def keep(entries):
        seen.extend(entries)
        return [True] * len(entries)

    torch._dynamo.reset()
    torch.compile(fn, backend="eager", options={"guard_filter_fn": keep})(*args)
    return [(e.orig_guard.name, guard_sites.made_by_memo(e.orig_guard.name, e.guard_type,
                                                             tuple(e.derived_guard_types or ()), e.orig_guard.user_stack))
            for e in seen if e.guard_type == "ID_MATCH"]


def test_the_memos_identity_guards_are_told_from_the_packages_own():
    made = identity_guards(copied, torch.ones(2), Options())
    # every object deepcopy visits: the options, their __dict__, each list, each float
    assert {"L['options']", "L['options'].__dict__", "L['options'].__dict__['weights']"} <= {s for s, _ in made}
    assert all(by_memo for _, by_memo in made)
    assert identity_guards(identified, torch.ones(2), Options()) == [("L['options']", False)]
    # only a plain ID_MATCH made in the copy module, on a source that finds the object itself
    memo = stack(("model.py", 7, "f", "made = copy.deepcopy(o)"), (copy.__file__, 137, "deepcopy", "d = id(x)"))
    assert guard_sites.made_by_memo("L['o']", "ID_MATCH", (), memo)
    assert not guard_sites.made_by_memo("L['o']", "CLOSURE_MATCH", (), memo)
    assert not guard_sites.made_by_memo("dict(L['o'].__dict__)", "ID_MATCH", (), memo)
    assert not guard_sites.made_by_memo("L['o']", "ID_MATCH", (), None)
    assert not guard_sites.made_by_memo("L['o']", "ID_MATCH", (), [object()])
    # the caller's own memo, which outlives the copy and holds its ids; a call the line does not show whole
    for line in ("made = copy.deepcopy(o, memo)", "made = copy.deepcopy(o, memo=seen)", "made = copy.deepcopy(",
                 "a, b = copy.deepcopy(o), copy.deepcopy(p)"):
        called = stack(("model.py", 7, "f", line), (copy.__file__, 137, "deepcopy", "d = id(x)"))
        assert not guard_sites.made_by_memo("L['o']", "ID_MATCH", (), called), line
    # a __deepcopy__ of the package's between the copy's frames (it may keep the memo), or no caller
    through = stack(("model.py", 7, "f", "made = copy.deepcopy(o)"), (copy.__file__, 151, "deepcopy", "y = copier(memo)"),
                    ("model.py", 30, "__deepcopy__", "return copy.deepcopy(self.a, memo)"),
                    (copy.__file__, 137, "deepcopy", "d = id(x)"))
    assert not guard_sites.made_by_memo("L['o']", "ID_MATCH", (), through)
    assert not guard_sites.made_by_memo("L['o']", "ID_MATCH", (), stack((copy.__file__, 137, "deepcopy", "d = id(x)")))


def stack(*frames):
    return traceback.StackSummary.from_list(list(frames))


def test_the_memos_ids_in_the_compiled_code_keep_it_traced():
    kept = Options()
    memo = {"L['options']": kept, "L['options'].weights": kept.weights}
    leaking = compile(f"def f():\n    return {{{id(kept.weights)}: 1}}", "<leak>", "exec")
    assert "whose ids its compiled code keeps" in guard_sites.ids_kept(memo, leaking)
    assert guard_sites.ids_kept(memo, compile("def f():\n    return {1: 2}", "<no leak>", "exec")) is None
    assert guard_sites.ids_kept(memo, None) is not None  # a code not read: kept, for all this can tell
    assert guard_sites.ids_kept({}, None) is None  # no guard of the memo's
    assert not guard_sites.made_by_memo("L['o'](1)", "ID_MATCH", (), memo)  # not a path evaluated here


def test_held_by_how_the_objects_alias_not_by_which_they_are():
    sources = ["L['options']", "L['options'].weights", "L['options'].shifts"]
    built = Options()
    records = guard_sites.grouped(dict(zip(sources, [built, built.weights, built.shifts])))
    assert [r["described"] for r in records] == [{"kind": dynamo_sources.DEEPCOPY_MEMO, "group": g} for g in (0, 1, 2)]
    check, held = held_objects.held(records, {})
    assert held == 3
    assert check({"options": Options()}) and check({"options": built})  # any instance that aliases as built
    same = [1.0, 2.0]
    assert not check({"options": Options(weights=same, shifts=same)})  # the copy would share one list
    assert not check({"options": None})  # a source not there: not the objects the entry was made for
    # the build's lists one and the same: so must this call's be
    aliased = Options(weights=same, shifts=same)
    records = guard_sites.grouped(dict(zip(sources, [aliased, aliased.weights, aliased.shifts])))
    assert [r["described"]["group"] for r in records] == [0, 1, 1]
    check, _ = held_objects.held(records, {})
    assert check({"options": Options(weights=same, shifts=same)}) and not check({"options": Options()})
    # beside an object held by what it is, both hold
    mixed, held = held_objects.held(records + [{"source": "G['torch'].tanh", "type": "ID_MATCH", "code": False,
                                                "described": dynamo_sources.describe(torch.tanh)}],
                                    {"torch": torch})
    assert held == 4 and mixed({"options": aliased}) and not mixed({"options": built})
    # a record this version does not evaluate is refused, not guessed at
    assert held_objects.held([{**records[0], "source": "dict(L['options'].__dict__)"}], {})[0] is None


def test_no_memo_guard_is_taken_where_torch_keeps_a_guard_made_twice_once():
    assert guard_sites.each_site_kept() and guard_sites._copy_module_read()
    code = ("import torch\nfrom hatch_precompile.builder.served import guard_sites\n"
            "print(guard_sites.each_site_kept())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(MISBEHAVE), "MISBEHAVE": "guard-sites", "PATH": "/usr/bin:/bin"})
    assert proc.stdout.split()[-1] == "False", proc.stderr
