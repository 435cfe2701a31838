"""The paths a loaded kernel's compile command names, without importing ``torch.utils.cpp_extension``.

To find a kernel's ``.so``, Inductor builds the command that would compile it (the command is part
of the kernel's key), and the first such build imports ``torch.utils.cpp_extension`` for torch's
include and library dirs; that module imports setuptools (0.06 s on this project's 2-core test
machine). While a served graph loads in a process that has not imported it, a stand-in answers the
names Inductor's CPU path takes from it, ``include_paths`` and ``library_paths`` (for the CPU)
and ``TORCH_LIB_PATH``, computed as torch's module computes them: its source for them, and for the
torch path they derive from, must be one read here (``KNOWN``, by digest), else torch's module is
imported. Torch 2.14+ also reads its ``CUDA_HOME`` there (whether it is None): answered as torch's
module computes it at import (``_find_cuda_home`` on a CUDA build, without the warning its import logs), where that
source is one read here (``CUDA_HOME_KNOWN``) -- on a CUDA build of torch, importing it cost 75 ms of
every served start. Anything else asked of the stand-in imports the real module and answers from it."""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import re
import shutil
import sys
from typing import Any, Callable

from hatch_precompile.run.torch_internals.patching import enabled, wrap
from hatch_precompile.run.torch_internals.registry import lookup
from hatch_precompile.run.torch_internals.served.stand_ins.module_stand_in import Unimported, placed

FUNCTIONS = ("include_paths", "library_paths")
NAMES = ("_HERE", "_TORCH_PATH", "TORCH_LIB_PATH", "get_file_path", *FUNCTIONS)
# sha256 of torch's top-level lines naming one of NAMES, and of its FUNCTIONS, -> how its torch path is made.
KNOWN = {
    "02b8094c98be7eb80e8092f952384626890f479eb952e6d808aeb4cf2a8a86b1": "from this file",  # 2.7.1
    "5f4f8a7ad4c28cc892b08f76cdfd231887d130868bdee01341877995ee4e608c": "from this file",  # 2.13.0
    "d7566fedaeeb74c2e9d8580731f88736d1df3fab4bcd5001c844e3ccdc9cc98f": "get_file_path",  # 2.14.1
}

# sha256 of torch's top-level lines that make CUDA_HOME and IS_WINDOWS, and of _find_cuda_home.
CUDA_HOME_KNOWN = {
    "40301acaa15db834c369f4ba6ad762f4bdaae1e8f422ef86ade9b34804e045cb",  # 2.13.0, 2.14.1
}


def install() -> None:
    """From now on, while a graph torch loads from its cache builds its kernels' commands in this
    process, where ``torch.utils.cpp_extension`` is not imported, the stand-in answers for it."""
    wrap("post-compile-graph", around=_around)


def _around(arguments: dict[str, Any]) -> Callable[[], None] | None:
    stand_in = _stand_in()
    return None if stand_in is None else placed(stand_in)


def _stand_in() -> Unimported | None:
    point = lookup("extension-paths", "answer")
    if not enabled() or point.module in sys.modules:
        return None
    try:
        torch_path = computed_torch_path(point.module)
    except Exception:  # no source to read, or torch's helper moved: torch's module is imported
        return None
    return _Unimported(point.module, torch_path, cuda_home_read_here(point.module)) if torch_path else None


@functools.cache
def computed_torch_path(module: str) -> str | None:
    """The torch path ``module`` computes its paths from, where its source for them is one read here."""
    source = _source(module)
    names = "|".join(NAMES)  # every top-level line naming one, and the functions
    digest = source and _digest(source[1], names, rf"^(?=\S).*?\b(?:{names})\b.*$", FUNCTIONS)
    how = KNOWN.get(digest or "")
    if source and how == "from this file":
        return os.path.dirname(os.path.dirname(os.path.abspath(source[0])))
    if how == "get_file_path":
        return str(importlib.import_module("torch._utils_internal").get_file_path("torch"))
    return None


@functools.cache
def cuda_home_read_here(module: str) -> bool:
    """Whether ``module`` computes its ``CUDA_HOME`` as ``_cuda_home`` does (its source, by digest)."""
    source = _source(module)
    digest = source and _digest(source[1], "CUDA_HOME", r"^(?:CUDA_HOME|IS_WINDOWS)\s*=.*$", ("_find_cuda_home",))
    return digest in CUDA_HOME_KNOWN


@functools.cache
def _source(module: str) -> tuple[str, str] | None:
    """(the file, its text) of ``module``'s source, read once, without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return None
    with open(spec.origin, encoding="utf-8") as source:
        return spec.origin, source.read()


def _digest(text: str, names: str, lines: str, functions: tuple[str, ...]) -> str | None:
    """sha256 of the source's ``lines`` (a pattern) and its top-level ``functions``; None where a
    function rebinds one of ``names`` (not computed once, at import) or a function is missing."""
    if re.search(rf"^\s*(global|nonlocal)\s.*\b({names})\b", text, re.MULTILINE):
        return None
    bodies = []
    for function in functions:
        start = text.find(f"\ndef {function}(") + 1
        if not start:
            return None
        after = re.compile(r"\n(?=\S)").search(text, start)
        bodies.append(text[start:after.start() if after else len(text)])
    return hashlib.sha256("\n".join([*re.findall(lines, text, re.MULTILINE), *bodies]).encode()).hexdigest()


@functools.cache
def _cuda_home(module: str) -> str | None:
    """``CUDA_HOME`` as ``module`` computes it at import (torch's ``_find_cuda_home``, off Windows), once
    a process as its import does. Its warning where no CUDA runtime is found is not logged: it says
    what importing the module found, and the module is not imported (where it is, torch says it)."""
    import torch

    if not (torch.cuda._is_compiled() and torch.version.cuda):
        return None
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home is None:
        nvcc_path = shutil.which("nvcc")
        if nvcc_path is not None:
            cuda_home = os.path.dirname(os.path.dirname(nvcc_path))
        else:
            cuda_home = "/usr/local/cuda"
            if not os.path.exists(cuda_home):
                cuda_home = None
    return cuda_home


class _Unimported(Unimported):
    """``torch.utils.cpp_extension`` not imported: its CPU include paths and torch's library dir;
    anything else asked of it imports the real module and answers from it."""

    def __init__(self, name: str, torch_path: str, cuda_home_read: bool = False) -> None:
        # cuda_home_read: cuda_home_read_here(name), asked before the stand-in takes the module's place
        super().__init__(name, _torch_path=torch_path, TORCH_LIB_PATH=os.path.join(torch_path, "lib"),
                         _cuda_home_read=cuda_home_read and sys.platform != "win32")

    def __getattr__(self, name: str) -> Any:
        if name == "CUDA_HOME" and self._cuda_home_read and sys.modules.get(self.__name__) is self:
            try:
                return _cuda_home(self.__name__)  # once a process, as torch's import computes it
            except Exception:  # torch moved: its module answers
                pass
        return super().__getattr__(name)  # the real module imported (another reader), or anything else

    def include_paths(self, device_type: str = "cpu", *args: Any, **kwargs: Any) -> list[str]:
        torch_include_dirs = kwargs.pop("torch_include_dirs", args[0] if args else True)
        if device_type != "cpu" or kwargs or len(args) > 1:
            return self.real().include_paths(device_type, *args, **kwargs)
        lib_include = os.path.join(self._torch_path, "include")
        # Remove this once torch/torch.h is officially no longer supported for C++ extensions. (torch's)
        return [lib_include, os.path.join(lib_include, "torch", "csrc", "api", "include")] if torch_include_dirs else []

    def library_paths(self, device_type: str = "cpu", *args: Any, **kwargs: Any) -> list[str]:
        torch_include_dirs = kwargs.pop("torch_include_dirs", args[0] if args else True)
        kwargs.pop("cross_target_platform", None)  # read by torch's for CUDA only
        if device_type != "cpu" or kwargs or len(args) > 2:
            return self.real().library_paths(device_type, *args, **kwargs)
        return [self.TORCH_LIB_PATH] if torch_include_dirs else []
