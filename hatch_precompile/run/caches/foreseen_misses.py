"""What load() can already see of this process that will make the shipped graphs miss.

Torch's cache keys hold process settings a program makes before it imports a package: deterministic
algorithms, the default dtype, the float32 matmul precision, and the variables torch reads into the
config entries its keys hold (``TORCHINDUCTOR_MAX_AUTOTUNE``, ``CI`` from torch 2.11; not
``TORCHINDUCTOR_COMPILE_THREADS``, whose entry the keys leave out: child/key_variables.py). The build
records them (``Manifest.visible``);
where this process already differs, load() says so once, naming the setting, instead of the user
finding every graph compiled. What a program sets after the import, only verify and snoop see.
Reads torch only if it is already imported: load() never imports it for this.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from hatch_precompile.protocol import CACHE_DIR_VAR, DYNAMIC_THREADS_VAR

# Read by torch, but not into the key, or made to agree by load() itself (run/caches/cache_keys_as_built.py).
_NOT_IN_KEY = (CACHE_DIR_VAR, DYNAMIC_THREADS_VAR)
_PREFIXES = ("TORCHINDUCTOR_", "TORCHDYNAMO_", "TORCH_COMPILE_")
ALIASING_VAR = "TORCHINDUCTOR_ERROR_ON_CUSTOM_OP_ALIASING"


def key_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables torch reads into its compile config, as set in ``environ``."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith(_PREFIXES) and k not in _NOT_IN_KEY}


def record(torch: Any, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """This process's visible settings (the build's child records them for the manifest)."""
    return {
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "default_dtype": str(torch.get_default_dtype()),
        "float32_matmul_precision": str(torch.get_float32_matmul_precision()),
        "variables": key_variables(os.environ if environ is None else environ),
    }


def contradictions(built: dict[str, Any] | None, torch_version: str, environ: Mapping[str, str] | None = None
                   ) -> list[str]:
    """What this process visibly sets otherwise than the build, as notes; [] where nothing is known."""
    if not isinstance(built, dict):
        return []
    env = os.environ if environ is None else environ
    notes = []
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            here = record(torch, env)
        except Exception:  # a torch without these functions: nothing said
            here = {"variables": key_variables(env)}
        calls = {"deterministic": "torch.use_deterministic_algorithms({})",
                 "default_dtype": "torch.set_default_dtype({})",
                 "float32_matmul_precision": "torch.set_float32_matmul_precision({!r})"}
        for name, call in calls.items():
            if name in built and name in here and built[name] != here[name]:
                notes.append(f"this process has {call.format(here[name])} and the graphs were compiled with "
                             f"{call.format(built[name])}: every graph will compile again")
    else:
        here = {"variables": key_variables(env)}
    shipped, mine = built.get("variables") or {}, here["variables"]
    # The variables the build found feeding torch's keys (child/key_variables.py); an older manifest has
    # none recorded, and then every variable of torch's prefixes is noted.
    in_key = built.get("key_variables")
    for name in sorted({*shipped, *mine}):
        if isinstance(in_key, list) and name not in in_key:
            continue  # torch reads it into no entry its keys hold (compile_threads, the cache's own switches)
        if name == ALIASING_VAR and name not in shipped and mine[name].strip() in ("0", "False", "false"):
            continue  # the build's value, set back under CI (below)
        if shipped.get(name) != mine.get(name):
            now = f"{name}={mine[name]}" if name in mine else f"{name} unset"
            then = f"{name}={shipped[name]}" if name in shipped else "it unset"
            notes.append(f"{now} here and the graphs were compiled with {then}: " + (
                "torch's cache keys hold the setting it makes, so every graph will compile again"
                if isinstance(in_key, list) else "graphs whose key holds it will compile again"))
    if env.get("CI", "").strip() and ALIASING_VAR not in env and _at_least(torch_version, (2, 11)):
        notes.append(f"CI={env['CI']} here, which from torch 2.11 turns on a setting in every graph's key "
                     f"(the build ran without it): every graph will compile again; {ALIASING_VAR}=0 keeps "
                     "the build's")
    return notes


def _at_least(version: str, floor: tuple[int, int]) -> bool:
    try:
        major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= floor
