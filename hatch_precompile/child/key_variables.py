"""Which environment variables feed torch's cache keys, judged from torch's own config modules.

Torch's FX-graph and AOTAutograd keys hold every entry of Inductor's and functorch's config but
those the config module itself leaves out of its portable form (``_save_config_ignore`` and the
prefixes of ``_cache_config_ignore_prefix``: ``compile_threads``, ``trace``, ...). Many entries are
set from a variable when torch is imported: declared with ``Config(env_name_default=...,
env_name_force=...)``, or read with ``os.environ`` in the entry's own assignment (or in the
module's function that computes it: ``compile_threads = decide_compile_threads()``). Both are read
here, in the build's child, from the config modules and their source; the manifest keeps the
result (``visible.key_variables``), and load() notes only a variable that feeds an entry the key
holds (run/caches/foreseen_misses.py). A variable the scan does not find is never noted: the note says what is
known, and ``verify``/``snoop`` show every miss with its field.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from typing import Any

CONFIGS = ("torch._inductor.config", "torch._functorch.config")
_VARIABLE = re.compile(r"(TORCHINDUCTOR|TORCHDYNAMO|TORCH_COMPILE|TORCH)_[A-Z0-9_]+")


def variables_in_keys() -> dict[str, dict[str, list[str]]]:
    """``{"key": {variable: [entries]}, "ignored": {variable: [entries]}}`` for the config modules
    of this torch; what cannot be read is left out."""
    found: dict[str, dict[str, list[str]]] = {"key": {}, "ignored": {}}
    for name in CONFIGS:
        try:
            module = importlib.import_module(name)
            feeds = _feeds(module)
            ignored = _ignored(module)
        except Exception:  # another torch's config: nothing known of it, nothing noted
            continue
        for variable, entries in feeds.items():
            for entry in entries:
                where = "ignored" if ignored(entry) else "key"
                found[where].setdefault(variable, []).append(f"{name.rsplit('.', 2)[-2].lstrip('_')}.{entry}")
    # A variable that feeds any entry in the key is in the key, whatever else it feeds.
    for variable in found["key"]:
        found["ignored"].pop(variable, None)
    return found


def _ignored(module: Any) -> Any:
    names = set(getattr(module, "_save_config_ignore", []) or [])
    prefixes = tuple(getattr(module, "_cache_config_ignore_prefix", []) or []) + ("_",)
    return lambda entry: entry in names or entry.startswith(prefixes)


def _feeds(module: Any) -> dict[str, list[str]]:
    """variable -> the config entries it sets, from the entries' declarations and their source."""
    feeds: dict[str, list[str]] = {}
    for entry, spec in (getattr(module, "_config", None) or {}).items():
        for attribute in ("env_name_default", "env_name_force"):
            names = getattr(spec, attribute, None)
            for variable in [names] if isinstance(names, str) else list(names or []):
                feeds.setdefault(variable, []).append(entry)
    tree = ast.parse(inspect.getsource(module))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    for entry, value in _assignments(tree.body, ""):
        for variable in _variables(value, functions):
            if entry not in feeds.setdefault(variable, []):
                feeds[variable].append(entry)
    return feeds


def _assignments(body: list[ast.stmt], prefix: str) -> list[tuple[str, ast.AST]]:
    """(entry, value) of each assignment in a config module, nested config classes as ``cpp.threads``."""
    found: list[tuple[str, ast.AST]] = []
    for node in body:
        if isinstance(node, ast.ClassDef):
            found += _assignments(node.body, f"{prefix}{node.name}.")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.append((prefix + node.targets[0].id, node.value))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found.append((prefix + node.target.id, node.value))
    return found


def _variables(value: ast.AST, functions: dict[str, ast.FunctionDef]) -> set[str]:
    """The variable names in ``value``, and in the module's functions it calls (one level)."""
    found = {n.value for n in ast.walk(value) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and _VARIABLE.fullmatch(n.value)}
    for call in (n for n in ast.walk(value) if isinstance(n, ast.Call)):
        function = functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if function is not None:
            found |= {n.value for n in ast.walk(function) if isinstance(n, ast.Constant)
                      and isinstance(n.value, str) and _VARIABLE.fullmatch(n.value)}
    return found
