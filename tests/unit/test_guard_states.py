"""Guard states read ahead of a first-call install: read once, importing nothing on the reading thread."""

from __future__ import annotations

import pickle
import sys
import threading

from hatch_precompile.run.torch_internals.served import guard_states


def test_a_state_read_ahead_is_taken_by_one_install_only():
    raw = pickle.dumps({"guards": [1, 2, 3]})
    assert guard_states.read_ahead(iter([raw, raw]), pickle.loads) == 1
    assert guard_states.taken(guard_states.digest(raw)) == {"guards": [1, 2, 3]}
    assert guard_states.taken(guard_states.digest(raw)) is None  # an install tried again reads its own


def test_a_state_naming_a_module_not_imported_yet_is_left_to_the_install(tmp_path, monkeypatch):
    (tmp_path / "not_yet_imported_mod.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    raw = b"cnot_yet_imported_mod\nVALUE\n."  # pickle's GLOBAL: imports the module where it is not
    assert guard_states.read_ahead(iter([raw]), pickle.loads) == 0
    assert "not_yet_imported_mod" not in sys.modules and guard_states.taken(guard_states.digest(raw)) is None
    assert not any(isinstance(f, guard_states._NoNewImports) for f in sys.meta_path)
    assert pickle.loads(raw) == 41  # at the install, read as before


def test_another_threads_import_is_not_refused_while_states_are_read(tmp_path, monkeypatch):
    (tmp_path / "other_thread_mod.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = []

    def load_state(raw: bytes) -> object:
        worker = threading.Thread(target=lambda: found.append(__import__("other_thread_mod").VALUE))
        worker.start()
        worker.join()
        return pickle.loads(raw)

    raw = pickle.dumps(("state", 2))
    assert guard_states.read_ahead(iter([raw]), load_state) == 1
    assert found == [7] and guard_states.taken(guard_states.digest(raw)) == ("state", 2)
