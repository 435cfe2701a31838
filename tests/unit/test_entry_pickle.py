"""run/torch_internals/served/entry_pickle.py on a made-up module in place of torch's decomposition tables:
what only a compile calls is read as a stand-in while its module is not imported, and is the real
function to whoever calls it, asks it anything, or pickles it again."""

from __future__ import annotations

import collections
import copy
import dataclasses
import pickle
import sys

import pytest

from hatch_precompile.run.torch_internals import registry
from hatch_precompile.run.torch_internals.served import entry_pickle

MODULE = "made_up_decompositions"


@pytest.fixture
def tables(tmp_path, monkeypatch):
    """A module, importable but not imported, whose ``select`` counts its imports; an entry that names it."""
    (tmp_path / f"{MODULE}.py").write_text(
        "import builtins\nbuiltins.made_up_imports = getattr(builtins, 'made_up_imports', 0) + 1\n"
        "def select():\n    return {'aten.add': 'decomposed'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    monkeypatch.delenv("HATCH_PRECOMPILE_NO_PATCHES", raising=False)
    monkeypatch.setitem(registry.REGISTRY, "decomp-table", dataclasses.replace(
        registry.REGISTRY["decomp-table"], module=MODULE, qualname="select"))
    import builtins
    monkeypatch.setattr(builtins, "made_up_imports", 0, raising=False)
    sys.modules.pop(MODULE, None)
    import importlib
    real = importlib.import_module(MODULE)
    entry = pickle.dumps({"fx_kwargs": {"get_decomp_fn": real.select, "is_backward": False}, "other": collections.OrderedDict})
    del sys.modules[MODULE]
    builtins.made_up_imports = 0
    yield entry
    sys.modules.pop(MODULE, None)


def test_a_compile_only_function_is_read_without_importing_its_module(tables):
    import builtins

    entry = entry_pickle.loads(tables)
    stand_in = entry["fx_kwargs"]["get_decomp_fn"]
    assert isinstance(stand_in, entry_pickle.CompileOnly) and MODULE not in sys.modules
    assert copy.deepcopy(entry)["fx_kwargs"]["get_decomp_fn"] is stand_in and copy.copy(stand_in) is stand_in
    assert MODULE not in sys.modules  # copied, as Inductor copies a loaded entry: still not imported
    assert builtins.made_up_imports == 0 and entry["other"] is collections.OrderedDict and entry["fx_kwargs"]["is_backward"] is False
    assert stand_in() == {"aten.add": "decomposed"}  # called: imported, and the real function answers
    assert builtins.made_up_imports == 1 and stand_in.__name__ == "select"
    assert copy.deepcopy(entry)["fx_kwargs"]["get_decomp_fn"] is stand_in  # copied as a function is: itself
    again = pickle.loads(pickle.dumps(entry))  # pickled again: the real function, by its name
    assert again["fx_kwargs"]["get_decomp_fn"] is sys.modules[MODULE].select


def test_asked_for_anything_the_stand_in_answers_as_the_real_function(tables):
    stand_in = entry_pickle.loads(tables)["fx_kwargs"]["get_decomp_fn"]
    assert stand_in.__qualname__ == "select" and stand_in.__code__.co_name == "select"
    assert MODULE in sys.modules


def test_where_the_module_is_imported_or_patches_are_off_the_entry_holds_the_real_function(tables, monkeypatch):
    import importlib

    module = importlib.import_module(MODULE)
    assert entry_pickle.loads(tables)["fx_kwargs"]["get_decomp_fn"] is module.select
    del sys.modules[MODULE]
    monkeypatch.setenv("HATCH_PRECOMPILE_NO_PATCHES", "1")
    assert entry_pickle.loads(tables)["fx_kwargs"]["get_decomp_fn"] is sys.modules[MODULE].select
