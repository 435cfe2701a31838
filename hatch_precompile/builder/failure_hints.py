"""What to do when a workload failed for want of a module or of a GPU: one line each, after the failure."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hatch_precompile.builder.target_environment import Choice
    from hatch_precompile.errors import WorkloadFailed


def hints(failure: WorkloadFailed, where: Choice) -> list[str]:
    """The lines that say what to do about ``failure``, for a workload run ``where``."""
    found = []
    if failure.missing_module:
        found.append(_missing_module(failure.missing_module, where))
    if failure.no_gpu:
        found.append(_no_gpu(failure.no_gpu))
    return found


def _missing_module(module: str, where: Choice) -> str:
    if where.target is not None:
        return (
            f"the workload imports {module!r}, which the environment being installed "
            f"into ({where.target.prefix}) does not have yet: installers add a project's dependencies "
            f"only after building its wheel. Install {module!r} there first, then install this project again"
        )
    return (
        f"the workload imports {module!r}, which the build environment ({sys.prefix}) does "
        "not have: set `require-runtime-dependencies = true` in [tool.hatch.build.hooks.precompile], "
        "or install it there"
    )


def _no_gpu(problem: str) -> str:
    return (
        f"the workload needs CUDA, and this build has no usable GPU: {problem}. Build the "
        "wheel on a machine with the GPU the package will run on, or let the workload fall back to the CPU "
        'and set `device = "cpu"` for a wheel with CPU artifacts only (`on-failure = "warn"` builds a plain '
        "wheel here instead of failing)"
    )
