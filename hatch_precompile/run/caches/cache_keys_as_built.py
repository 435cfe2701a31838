"""Where this process differs from the build only in ways that leave compiled code the same, its
cache keys agree with the build's.

Torch's FX-graph key (and so the AOTAutograd key built on it) holds every Inductor setting. Two of
them differ between machines without changing what the shipped graphs compute:

- ``cpp.dynamic_threads``. With it off, Inductor's C++ kernels bake the thread count of the process
  that compiled them into their code (``#pragma omp parallel num_threads(2)``), and since torch
  2.13 the count is part of the key: a wheel built on 2 cores is cold at 1, 8 or 32 threads, and
  before 2.13 it is warm but runs 2 threads on any machine. Builds turn it on, so the kernels read
  the thread count when they run, and load() turns it on in this process, when Inductor's config
  is imported, for every compile that follows (the README says so). A user's own
  ``TORCHINDUCTOR_CPP_DYNAMIC_THREADS`` wins; load() then says the graphs will miss.
- ``cpp.cxx`` (``CXX``): the compiler. The shipped kernels are binaries; Inductor's generated code
  depends on the compiler's family only (gcc or clang, told apart by the command's name). When
  ``CXX`` names another compiler of the build's family (``g++-12``, ``/usr/bin/g++``), the key is
  computed with the build's value, and relocate.py renames the kernels for this compiler's command
  line. The kernels that do compile here (a miss) are compiled by this process's compiler.

Both go through run/torch_internals/, at import of their torch module, once, failing safe: if
torch's internals are not what we expect, the graphs miss and compile as usual.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

from hatch_precompile.protocol import DYNAMIC_THREADS_VAR, Manifest
from hatch_precompile.run.sets import environment_key
from hatch_precompile.run.torch_internals import patching, settings
from hatch_precompile.run.torch_internals.caches import prefetch

_built_compiler: dict[str, Any] = {}


def match_build_keys(manifest: Manifest, note_later: Callable[[str], None]) -> list[str]:
    """Make this process's keys agree with ``manifest``'s build; what will still differ, as notes.
    What can only be known at the first compile goes to ``note_later`` then (``load()`` passes
    its ``note_once``: this module does not import the loader, which imports it)."""
    notes = []
    for name, value in manifest.settings.items():
        if name == "cpp.dynamic_threads" and value and os.environ.get(DYNAMIC_THREADS_VAR, "").strip():
            if os.environ[DYNAMIC_THREADS_VAR].strip() != "1":
                notes.append(f"{DYNAMIC_THREADS_VAR}={os.environ[DYNAMIC_THREADS_VAR]} here, and the graphs "
                             "were compiled with dynamic threads: they will compile again")
            continue
        settings.set_config("inductor-config", name, value)
    built = manifest.compiler or {}
    if built.get("config") is not None:
        notes.extend(_compiler_notes(built, note_later))
    return notes


def _compiler_notes(built: dict[str, Any], note_later: Callable[[str], None]) -> list[str]:
    """What load() can say of this process's compiler without running it: its family, by name (as
    Inductor tells). Whether it works is asked at Dynamo's first compile (``--version``): a process
    that compiles nothing (an exported step, a CLI's ``--help``) never starts the compiler."""
    command = environment_key.cxx_command()
    here = environment_key.compiler_family(command) if sys.platform != "darwin" else environment_key.compiler()["family"]
    if here != built.get("family"):
        # Its name is part of the graphs' key; the rest of its command line, of the kernels'.
        what = "their kernels compile" if command == built.get("command") else "the graphs compile"
        return [f"the C++ compiler here ({command}) is not of the build's family ({built.get('family')}, "
                f"{built.get('command')}): {what} again"]
    _built_compiler.setdefault("config", built["config"])
    _built_compiler.setdefault("family", built["family"])
    prefetch.at_first_compile(lambda: _say_if_unavailable(built, note_later))
    # After torch made the key's details: a hook that raises leaves them as torch made them.
    patching.wrap("hash-details", after=lambda arguments, _: agree_compiler(arguments["self"].inductor_config))
    return []


def _say_if_unavailable(built: dict[str, Any], note: Callable[[str], None]) -> None:
    here = environment_key.compiler()
    if here["version"].startswith("unavailable"):
        note(f"no working C++ compiler here ({here['command']}: {here['version']}): torch needs one, "
             f"of the {built.get('family')} family, even to load the shipped kernels")


def agree_compiler(inductor_config: dict[str, Any]) -> None:
    """Put the build's ``cpp.cxx`` into this key when this process's compiler stands in for it."""
    here, built = inductor_config.get("cpp.cxx"), _built_compiler.get("config")
    if built is None or _same(here, built) or not stands_in():
        return
    inductor_config["cpp.cxx"] = type(here)(built) if isinstance(here, (tuple, list)) else built


def _same(here: Any, built: Any) -> bool:
    as_list = list(here) if isinstance(here, (tuple, list)) else [here]
    return as_list == (list(built) if isinstance(built, (tuple, list)) else [built])


@functools.lru_cache(maxsize=None)
def _family_of_resolved(command: str) -> str:
    return environment_key.compiler_family(command, environment_key.remembered_compiler_version(command))


def stands_in() -> bool:
    """Whether the compiler Inductor resolved in this process is of the build's family."""
    try:
        command = settings.cpp_compiler()  # raises when no compiler works: then nothing stands in
    except Exception:
        return False
    return isinstance(command, str) and _family_of_resolved(command) == _built_compiler.get("family")
