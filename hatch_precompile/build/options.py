"""The hook's table (``[tool.hatch.build.hooks.precompile]``) as typed, checked options.

Backend-neutral: a dict in, Options out, or an OptionError whose message names the option and
says what was expected and what was found.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from hatch_precompile.protocol import CPU_TARGETS, DEFAULT_TIMEOUT, DEVICES, DOTTED_NAME, WORKLOAD

ON_FAILURE = ("error", "warn")
# Keys hatchling itself reads from every hook table.
RESERVED = frozenset(
    {"dependencies", "require-runtime-dependencies", "require-runtime-features", "enable-by-default"}
)


class OptionError(ValueError):
    """An option of the table is wrong; the message names it."""


@dataclasses.dataclass(frozen=True)
class Options:
    workloads: tuple[str, ...] = ()
    """``workload``: "module:callable" strings, run in order in one child process."""
    enable: bool = True
    """``enable``: the default; ``PRECOMPILE*`` variables and the preferences file override it."""
    timeout: float = DEFAULT_TIMEOUT
    """``timeout``: seconds for all workloads together."""
    on_failure: str = "error"
    """``on-failure``: "warn" builds a plain wheel when a workload fails."""
    package: str | None = None
    """``package``: the import package that ships ``_precompiled/``; default: the workload's."""
    cpu_capabilities: tuple[str, ...] = ()
    """``cpu-capabilities``: one artifact set per ``ATEN_CPU_CAPABILITY`` value; default: the machine's."""
    graph_breaks: str = "off"
    """``graph-breaks``: "warn" or "error" when the workload shows a graph break."""
    recompiles: str = "off"
    """``recompiles``: "warn" or "error" when the workload recompiles from an unstable shape, dtype or scalar."""
    device: str = "auto"
    """``device``: "cuda" fails the build without a usable GPU; "cpu" hides the GPU from the workload."""
    cpu_target: str = "portable"
    """``cpu-target``: "portable" kernels run on every CPU with the vector ISA Inductor picked;
    "native" ones (``-march=native``) only where the CPU has every feature of the build machine's."""

    @property
    def import_package(self) -> str | None:
        """The package that ships ``_precompiled/`` and calls ``load()``."""
        if self.package:
            return self.package
        if self.workloads:
            return self.workloads[0].split(":", 1)[0].split(".", 1)[0]
        return None


KNOWN = (
    "cpu-capabilities", "cpu-target", "device", "enable", "graph-breaks", "on-failure", "package", "recompiles",
    "timeout", "workload",
)
CHECKS = ("off", "warn", "error")
CAPABILITY = re.compile(r"[a-z][a-z0-9_]*")  # what ATEN_CPU_CAPABILITY takes: default, avx2, avx512, ...


def parse(table: dict[str, Any], hook: str) -> Options:
    """Options from the hook's table; raises OptionError naming the first bad option."""
    def bad(option: str, expected: str, found: Any) -> OptionError:
        return OptionError(f"Option `{option}` for build hook `{hook}` must be {expected}, got {found!r}")

    unknown = sorted(set(table) - set(KNOWN) - RESERVED)
    if unknown:
        raise OptionError(
            f"Unknown option(s) {', '.join(f'`{u}`' for u in unknown)} for build hook `{hook}`; "
            f"known options: {', '.join(KNOWN)}"
        )
    enable = table.get("enable", True)
    if not isinstance(enable, bool):
        raise bad("enable", "a boolean", enable)
    workloads = table.get("workload", [])
    if isinstance(workloads, str):
        workloads = [workloads]
    if not isinstance(workloads, list) or not all(isinstance(w, str) for w in workloads):
        raise bad("workload", "a string or an array of strings", workloads)
    for workload in workloads:
        if not WORKLOAD.fullmatch(workload):
            raise OptionError(
                f"Option `workload` for build hook `{hook}`: entry {workload!r} must look like "
                "'package.module:function'"
            )
    timeout = table.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise bad("timeout", "a positive number of seconds", timeout)
    on_failure = table.get("on-failure", "error")
    if on_failure not in ON_FAILURE:
        raise bad("on-failure", f"one of {', '.join(ON_FAILURE)}", on_failure)
    package = table.get("package")
    if package is not None and not (isinstance(package, str) and DOTTED_NAME.fullmatch(package)):
        raise bad("package", "an importable package name", package)
    capabilities = table.get("cpu-capabilities", [])
    if not isinstance(capabilities, list) or not all(isinstance(c, str) and CAPABILITY.fullmatch(c.lower()) for c in capabilities):
        raise bad("cpu-capabilities", 'an array of ATEN_CPU_CAPABILITY names (e.g. ["default", "avx2"])', capabilities)
    capabilities = list(dict.fromkeys(c.lower() for c in capabilities))
    checks = {}
    for option in ("graph-breaks", "recompiles"):
        checks[option] = table.get(option, "off")
        if checks[option] not in CHECKS:
            raise bad(option, f"one of {', '.join(CHECKS)}", checks[option])
    device = table.get("device", "auto")
    if device not in DEVICES:
        raise bad("device", f"one of {', '.join(DEVICES)}", device)
    cpu_target = table.get("cpu-target", "portable")
    if cpu_target not in CPU_TARGETS:
        raise bad("cpu-target", f"one of {', '.join(CPU_TARGETS)}", cpu_target)
    return Options(tuple(workloads), enable, float(timeout), on_failure, package, tuple(capabilities),
                   checks["graph-breaks"], checks["recompiles"], device, cpu_target)
