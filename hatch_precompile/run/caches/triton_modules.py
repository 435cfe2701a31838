"""Triton's C helper modules, built once at build and shipped, not in each process's fresh cache.

On a CUDA machine Triton's driver builds small C extension modules with the system's C compiler
the first time a process uses it and its cache lacks them: ``cuda_utils`` (its driver's helpers:
0.28-0.30 s of a warm first step on an NVIDIA H200, measured 2026-11-26) and, for a kernel Triton
launches itself rather than Inductor's static launcher, a launcher per signature. Triton's own
cache keys them by their source and absolute include paths, in its cache dir; in a fresh
container (an empty HOME and cache dir) every process builds them again.

The build's process keeps each module Triton built (``record``), stored as
``c_modules/<name>-<sha256 of its source>.so``. ``load()`` of a GPU set that ships some serves
them (``serve``): when Triton's driver asks for a module of the same name and source, the
shipped file -- checked against the manifest's sha256 -- is loaded as an extension module, and no
compiler starts. The set is already keyed by the Python ABI and Triton's version. Any other
request, or a file that does not load here, is left to Triton, which builds it as usual.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from hatch_precompile.protocol import C_MODULES_DIR
from hatch_precompile.run.torch_internals import patching

# Triton 3.6 names the module's source by its text, 3.8 by its file: one touchpoint each.
_TOUCHPOINTS = ("triton-c-module", "triton-c-module-file")


def logical_path(name: str, source: str) -> str:
    """Where a module of ``name`` built from ``source`` is stored in a set."""
    return f"{C_MODULES_DIR}/{name}-{hashlib.sha256(source.encode()).hexdigest()[:32]}.so"


def record(out: Path) -> None:
    """In the build's process: copy each module Triton's driver builds (or finds) into ``out``."""
    def keep(arguments: dict[str, Any], module: Any) -> None:
        request = _request(arguments)
        built = getattr(module, "__file__", None)
        if request is not None and isinstance(built, str) and os.path.isfile(built):
            target = out / Path(logical_path(*request)).name
            out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(built, target)

    for name in _TOUCHPOINTS:
        patching.wrap(name, after=keep)


def serve(found: Any) -> None:
    """In a user's process: answer Triton's driver with the modules ``found`` (an ArtifactSet) ships."""
    shipped = {path for path in found.manifest.files if path.startswith(f"{C_MODULES_DIR}/")}
    if not shipped:
        return
    loaded: dict[str, ModuleType] = {}

    def shipped_module(arguments: dict[str, Any]) -> Any:
        request = _request(arguments)
        if request is None or logical_path(*request) not in shipped:
            return patching.PASS
        path = logical_path(*request)
        if path not in loaded:
            loaded[path] = load_extension(request[0], found.read(path))  # raises: Triton builds it
        return loaded[path]

    for name in _TOUCHPOINTS:
        patching.wrap(name, instead=shipped_module)


def load_extension(name: str, data: bytes) -> ModuleType:
    """The extension module ``name`` from the bytes of its shared library (a private file)."""
    directory = tempfile.mkdtemp(prefix="hatch-precompile-c-module-")  # 0700
    path = os.path.join(directory, f"{name}.so")
    try:
        with open(path, "xb") as handle:
            handle.write(data)
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        if spec is None:
            raise ImportError(f"no module spec for {path}")
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module
    finally:
        shutil.rmtree(directory, ignore_errors=True)  # mapped by now: the module lives on


def _request(arguments: dict[str, Any]) -> tuple[str, str] | None:
    """(name, source text) of a call to Triton's builder, or None where they cannot be read."""
    name, source = arguments.get("name"), arguments.get("src")
    if source is None and isinstance(arguments.get("src_path"), str):
        try:
            source = Path(arguments["src_path"]).read_text()
        except OSError:
            return None
    return (name, source) if isinstance(name, str) and isinstance(source, str) else None
