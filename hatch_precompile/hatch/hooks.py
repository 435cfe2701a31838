"""hatchling plugin registration (``[project.entry-points.hatch] precompile = ...``)."""

from hatchling.plugin import hookimpl

from hatch_precompile.hatch.plugin import PrecompileBuildHook


@hookimpl
def hatch_register_build_hook():
    return PrecompileBuildHook
