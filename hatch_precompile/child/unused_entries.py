"""Why torch did not use a cache entry whose key it computed: the evidence ``why`` needs when a
graph's key is the shipped entry's and the graph compiled all the same.

Torch looks an entry up in three steps (``GuardedCache.find_guarded_entry`` and, for AOTAutograd,
``FxGraphCacheLoadable.load``, torch 2.13 to 2.15): it unpickles every file under the key's
directory (one that fails is logged and skipped), evaluates each entry's guard expression over
this call's symbolic sizes (``ShapeEnv.evaluate_guards_expression``: ``L['t0'] <= 64`` over the
values ``t0 = ...``), and loads the FX graphs an AOTAutograd entry names (each under its own key,
with the guard expression it was saved with). Recorded here, in an observed process:

- every guard expression that failed, with this process's values (touchpoint ``guard-eval``), and
  in the build every guard expression saved with an entry, with the build's values
  (``guard-expr``): ``why`` prints both;
- for a graph that missed while an entry was there (no guard failed), each file under its key read
  back as torch reads it, and the FX graph entries it names: the first that cannot be loaded, and
  the error (``cache-entries``).

Observation only: what cannot be read is not recorded, and nothing of torch's changes.
"""

from __future__ import annotations

import logging
import os
import pickle
from typing import Any

from hatch_precompile.child import key_details
from hatch_precompile.run.torch_internals import patching, settings

log = logging.getLogger("hatch_precompile.observe")

MAX_EXPR = 400  # a guard expression longer than this is cut (the failing part is usually first)


class Lookups:
    """Collects guard expressions (failed here, or saved with an entry) by compile id."""

    def __init__(self) -> None:
        self.failed: list[dict[str, Any]] = []  # {"compile_id", "expr", "values"}
        self.saved: list[dict[str, Any]] = []
        patching.wrap("guard-eval", after=self._evaluated)
        patching.wrap("guard-expr", after=self._produced)

    def _evaluated(self, arguments: dict[str, Any], result: Any) -> None:
        code, args = arguments.get("code"), arguments.get("args")
        if isinstance(code, str) and args is not None and not _true(result):
            failed = {"compile_id": key_details.current_compile_id(), "expr": _cut(code),
                      "values": {f"t{i}": _value(a) for i, a in enumerate(args)}}
            if failed not in self.failed:  # AOTAutograd's entry and the FX graphs it names: once
                self.failed.append(failed)

    def _produced(self, arguments: dict[str, Any], result: Any) -> None:
        placeholders = arguments.get("placeholders")
        if isinstance(result, str) and placeholders is not None:
            self.saved.append({"compile_id": key_details.current_compile_id(), "expr": _cut(result),
                               "values": {f"t{i}": _value(p) for i, p in enumerate(placeholders)}})

    def take(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(guards that failed, guards saved) since the last call."""
        failed, saved = self.failed, self.saved
        self.failed, self.saved = [], []
        return failed, saved


def _true(result: Any) -> bool:
    """Whether a guard held (torch's expression may answer with sympy's true, not Python's)."""
    try:
        return bool(result)
    except Exception:
        return True  # not an answer we can read: no failure recorded


def _cut(expr: str) -> str:
    return expr if len(expr) <= MAX_EXPR else expr[:MAX_EXPR] + " ..."


def _value(value: Any) -> Any:
    """A placeholder's value: an int as it is, a SymInt's hint, a tensor's shape."""
    if isinstance(value, (int, float, bool)):
        return value
    node = getattr(value, "node", None)
    hint = getattr(node, "hint", None)
    if isinstance(hint, int):
        return hint
    shape = getattr(value, "shape", None)
    if shape is not None:
        try:
            return [int(d) if str(d).lstrip("-").isdigit() else str(d) for d in shape]
        except Exception:
            return str(shape)
    return str(value)


def unloadable(key: str) -> dict[str, Any] | None:
    """Why the AOTAutograd entry under ``key`` could not be used, read back as torch reads it:
    ``{"file", "error"}`` for a file that cannot be loaded, ``{"fx_key", "error"}`` for an FX graph
    entry it names that is missing or cannot be loaded; ``{"absent": True}`` where there is no
    entry under the key; None where everything loads (or the layout is not what we expect)."""
    try:
        aot_dir, fx_dir = settings.cache_entry_dirs()
    except Exception:  # torch's layout moved: nothing to say
        log.debug("observer: torch's cache directories unknown", exc_info=True)
        return None
    paths = _entry_files(os.path.join(aot_dir, key))
    if not paths:
        return {"absent": True}
    for path in paths:
        try:
            entry = _read(path)
        except Exception as exc:
            return {"file": path, "error": f"{type(exc).__name__}: {exc}"}
        for part in ("compiled_fw", "compiled_bw"):
            problem = _fx_entry(getattr(entry, part, None), fx_dir)
            if problem is not None:
                return {**problem, "part": part.removeprefix("compiled_")}
    return None


def _fx_entry(loadable: Any, fx_dir: str) -> dict[str, Any] | None:
    info = getattr(loadable, "fx_graph_cache_info", None)
    if not (isinstance(info, tuple) and info and isinstance(info[0], str)):
        return None  # bundled (the graph is in the entry) or another torch's shape
    fx_key, wanted = info[0], getattr(loadable, "fx_graph_guard_expr", None)
    here = os.path.join(fx_dir, fx_key[1:3], fx_key)
    paths = _entry_files(here)
    if not paths:
        return {"fx_key": fx_key, "error": f"no FX graph entry under its key (looked in {here})"}
    guards = []
    for path in paths:
        try:
            graph = _read(path)
        except Exception as exc:
            return {"fx_key": fx_key, "file": path, "error": f"{type(exc).__name__}: {exc}"}
        guards.append(getattr(graph, "guards_expr", None))
    if wanted not in guards:
        return {"fx_key": fx_key, "error": f"no FX graph entry saved with the guards the entry names ({wanted!r}; "
                                           f"found {guards!r})"}
    return None


def _entry_files(directory: str) -> list[str]:
    """The entries under a key's directory, as torch lists them (its temporary files left out)."""
    if not os.path.isdir(directory):
        return []
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if not n.startswith(".")]


def _read(path: str) -> Any:
    with open(path, "rb") as f:
        return pickle.loads(f.read())
