"""Inductor's generated modules, shipped with a header that imports only what their code calls.

Torch writes the same header atop every module it generates. Two of its imports cost a served
process most of its start over eager: ``extern_kernels`` from ``select_algorithm``, whose import
brings in every lowering and kernel template (it is filled as they register), and ``align`` from
``memory_planning``. Where a module's code reads ``extern_kernels`` only as ``extern_kernels.NAME``
and the build's child proved each NAME's path from torch (child/kernel_bindings.py), that line binds
those names from torch instead; where the code never calls ``align``, that line goes. Each stays one
line, so that torch's line map still points at the code. Modules for Triton are left as torch wrote
them. The served proof runs the package on these files; where it fails, they are put back.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

SELECT = "from torch._inductor.select_algorithm import extern_kernels"
ALIGN = "from torch._inductor.codegen.memory_planning import _align as align"
_PATH = re.compile(r"torch(\.\w+)+")


def lean(source: str, bindings: Mapping[str, str]) -> str | None:
    """``source`` with the lean header; None where nothing in it can go."""
    if re.search(r"^\s*(?:import|from)\s+triton\b|triton_heuristics", source, re.M):
        return None
    lines = source.split("\n")
    if "import torch" not in lines:
        return None
    changed = False
    if lines.count(SELECT) == 1 and lines.index(SELECT) > lines.index("import torch"):
        used = re.findall(r"\bextern_kernels\.(\w+)", source)
        only_so = len(re.findall(r"\bextern_kernels\b", source)) == len(used) + 1  # the import's own
        paths = {name: bindings.get(name, "") for name in sorted(set(used))}
        if only_so and all(_PATH.fullmatch(path) for path in paths.values()):
            bound = ", ".join(f"{name}={path}" for name, path in paths.items())
            lines[lines.index(SELECT)] = (f"extern_kernels = __import__('types').SimpleNamespace({bound})"
                                          "  # hatch-precompile: what this code calls, as select_algorithm binds it")
            changed = True
    if lines.count(ALIGN) == 1 and len(re.findall(r"\balign\b", source)) == 1:
        lines[lines.index(ALIGN)] = "# hatch-precompile: memory_planning's align, which this code does not call"
        changed = True
    return "\n".join(lines) if changed else None


def apply(cache_dir: Path, bindings: Mapping[str, str] | None) -> dict[Path, str]:
    """Each generated module of Inductor's code cache in ``cache_dir`` given its lean header; what
    each changed file held before (``restore`` puts it back)."""
    before = {}
    for path in sorted(cache_dir.glob("??/*.py")):
        source = path.read_text()
        leaner = lean(source, bindings or {})
        if leaner is not None:
            before[path] = source
            path.write_text(leaner)
    return before


def restore(before: Mapping[Path, str]) -> None:
    for path, source in before.items():
        path.write_text(source)
