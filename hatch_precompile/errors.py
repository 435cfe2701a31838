"""Every error of hatch-precompile's own, and the exit status the command line gives it.

One base, ``HatchPrecompileError``; each subclass carries its ``exit_code`` (as cibuildwheel's
``errors.py`` does), so ``hatch-precompile``'s ``main`` has one ``except`` for all of them. The
run side's own reasons (a skip, a refusal) derive from it too, though ``load()`` never lets one
out. Standard library only.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FOUND = 1  # `verify` found a miss, `report` found no artifacts
EXIT_USAGE = 2  # a usage error, a package not installed, a workload that raised
EXIT_WORKLOAD_FAILED = 3  # a build's or verify's child: a workload raised
EXIT_INTERRUPTED = 130


class HatchPrecompileError(Exception):
    """An error hatch-precompile reports in one line; the command line exits with ``exit_code``."""

    exit_code = EXIT_USAGE


class PrecompileWarning(UserWarning):
    """Precompiled caches, a step or the per-user store were not used; the program compiles as usual."""


class UsageError(HatchPrecompileError):
    """A command line, option or target that names nothing usable."""


class NotFound(HatchPrecompileError):
    """``report`` found no artifacts: a finding, not a usage error."""

    exit_code = EXIT_FOUND
