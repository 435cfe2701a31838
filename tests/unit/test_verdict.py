"""run/sets/verdict.py: the one decision whether a package's sets can be used here, over facts given as
data (no torch, no machine: each case says what here is)."""

from __future__ import annotations

import json

import pytest

from hatch_precompile.protocol import FileEntry, Manifest
from hatch_precompile.run.sets import verdict

ENV = {"python": "3.11", "torch": "2.13.0+cpu", "cpu_capability": "AVX512", "system": "Linux"}
PACKAGE = "no_such_package_here"  # the rebuild advice for a package no installer put here


def here(env=None, features=frozenset({"avx2", "avx512f"}), missing=()) -> verdict.Here:
    return verdict.Here(dict(ENV if env is None else env), features, lambda needed: [n for n in needed if n in missing])


def manifest(env=None, **fields) -> bytes:
    made = Manifest(PACKAGE, dict(ENV if env is None else env), {"inductor/x": FileEntry(1, "0" * 64)}, **fields)
    return json.dumps(made.to_dict()).encode()


def sets(warmed=False, **manifests: bytes) -> verdict.Sets:
    return verdict.Sets(f"/{'store' if warmed else 'wheel'}", manifests, warmed)


def never(*_):
    raise AssertionError("asked though the decision was already made")


def test_the_first_shipped_set_that_fits_is_used_and_the_store_is_not_read():
    shipped = sets(a=manifest({**ENV, "torch": "2.14.1"}), b=manifest())
    chosen = verdict.set_to_use(PACKAGE, shipped, never, lambda: here())
    assert isinstance(chosen, verdict.Chosen) and chosen.name == "b" and not chosen.sets.warmed


def test_nothing_shipped_and_nothing_stored_gathers_no_facts():
    """No set anywhere: no torch import (here() is never asked), and no refusal to say."""
    assert verdict.set_to_use(PACKAGE, None, lambda facts: None, never) is None


def test_a_stored_set_serves_where_the_shipped_ones_do_not_fit():
    stored = sets(warmed=True, w=manifest())
    chosen = verdict.set_to_use(PACKAGE, sets(a=manifest({**ENV, "torch": "2.14.1"})), lambda facts: stored, lambda: here())
    assert isinstance(chosen, verdict.Chosen) and chosen.name == "w" and chosen.sets.warmed


def test_a_refusal_names_each_set_and_the_fix():
    shipped = sets(a=manifest({**ENV, "torch": "2.14.1"}), b=manifest({**ENV, "cpu_capability": "AVX2"}))
    refused = verdict.set_to_use(PACKAGE, shipped, lambda facts: None, lambda: here())
    assert isinstance(refused, verdict.Refusal)
    assert refused.reason.startswith("none of the 2 artifact sets fits this environment: "
                                     "a: built for torch='2.14.1', this environment has torch='2.13.0+cpu'; "
                                     "b: built for cpu_capability='AVX2'")
    assert refused.reason.endswith(f"or run `hatch-precompile warm {PACKAGE}`")


def test_the_shipped_and_the_stored_refusals_are_said_together():
    stored = sets(warmed=True, w=manifest({**ENV, "python": "3.12"}))
    refused = verdict.set_to_use(PACKAGE, verdict.Refusal("cannot read the artifacts"), lambda facts: stored, lambda: here())
    assert isinstance(refused, verdict.Refusal)
    assert refused.reason.startswith("cannot read the artifacts; warmed artifacts in /store: built for python='3.12'")
    unreadable = verdict.set_to_use(PACKAGE, None, lambda facts: verdict.Refusal("another account's store"), never)
    assert unreadable == verdict.Refusal("another account's store")


def test_the_store_is_read_for_this_environments_key():
    seen = []
    verdict.set_to_use(PACKAGE, None, lambda facts: seen.append(facts().env) or None, lambda: here())
    assert seen == [ENV]


def test_a_bad_manifest_is_a_reason_and_no_advice_to_rebuild():
    refused = verdict.set_to_use(PACKAGE, sets(a=b"{"), lambda facts: None, lambda: here())
    assert isinstance(refused, verdict.Refusal) and "warm" not in refused.reason


@pytest.mark.parametrize(("fields", "facts", "reason"), [
    ({"cpu_features": ["avx512f", "amx_tile"], "cpu_target": "portable"}, here(),
     "its kernels may use CPU features this CPU lacks: amx_tile (built for another CPU)"),
    ({"cpu_features": ["avx512f", "amx_tile"], "cpu_target": "native"}, here(),
     "its kernels may use CPU features this CPU lacks: amx_tile (built with -march=native on another CPU)"),
    ({"cpu_features": ["avx2"], "cpu_target": "native"}, here(features=None),
     "its kernels may use the CPU features avx2 (built with -march=native), and this machine's CPU features "
     "cannot be read to check them"),
    ({"cpu_features": ["avx2"], "cpu_target": "portable"}, here(features=None), None),
    ({"libraries": {"libgomp.so.1": {}}}, here(missing=("libgomp.so.1",)),
     "its kernels need system libraries this machine lacks: libgomp.so.1"),
    ({"libraries": {"libgomp.so.1": {}}}, here(), None),
])
def test_one_sets_problem_on_this_machine(fields, facts, reason):
    assert verdict.problem(Manifest.parse(manifest(**fields)), facts) == reason
