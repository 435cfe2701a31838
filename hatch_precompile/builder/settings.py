"""Everything a build is told, merged in one place: the hook's table, the environment, the preferences.

``read()`` turns hatch's table into Options (options.py), decides the switch (the ``PRECOMPILE``
variables beat the environment's preferences file, which beats the table's ``enable``:
run/switch.py) and reads the build's own variables (run/variables.py). Whatever of them is wrong:
one OptionError naming each option, variable or file, before any workload runs. Backend-neutral.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hatch_precompile.builder.options import Options, parse
from hatch_precompile.errors import OptionError
from hatch_precompile.run import switch, variables


@dataclasses.dataclass(frozen=True)
class Settings:
    options: Options
    enabled: bool
    why: str  # which switch decided: "default", "PRECOMPILE=0", "<file>: [pkg] enable = false", ...
    heartbeat: float  # seconds between a long phase's progress lines
    torch_trace: Path | None = None  # where torch's structured trace of the workloads goes (absolute)


def read(table: dict[str, Any], hook: str, project: str, environ: Mapping[str, str] | None = None,
         root: Path | None = None) -> Settings:
    """The build's settings; raises one OptionError naming everything that is wrong. ``root``, the
    project's dir, is what a relative ``torch-trace`` is relative to (a relative
    ``HATCH_PRECOMPILE_TORCH_TRACE``, as any path in a variable, is relative to the working dir)."""
    problems: list[str] = []
    try:
        options = parse(table, hook)
    except OptionError as exc:
        problems += exc.problems
        options = Options()
    package = options.import_package
    enabled, why, heartbeat = True, "default", variables.HEARTBEAT_SECONDS
    try:
        enabled, why = switch.enabled(project, options.enable, environ, aliases=[package] if package else [], build=True)
    except ValueError as exc:  # GateValueError included
        problems.append(f"build hook `{hook}`: {exc}")
    try:
        heartbeat = variables.heartbeat(environ)
    except ValueError as exc:
        problems.append(f"build hook `{hook}`: {exc}")
    if problems:
        raise OptionError(*problems)
    return Settings(options, enabled, why, heartbeat, torch_trace(options, root, environ))


def torch_trace(options: Options, root: Path | None, environ: Mapping[str, str] | None = None) -> Path | None:
    """Where torch's structured trace of the workloads goes, absolute: ``HATCH_PRECOMPILE_TORCH_TRACE``
    (relative to the working dir), else the table's ``torch-trace`` (relative to ``root``, the
    project's dir; the working dir where None), else nowhere."""
    trace = variables.torch_trace(environ)
    if trace:
        return Path(trace).absolute()
    return (root or Path.cwd()).absolute() / options.torch_trace if options.torch_trace else None
