"""Every exception and warning hatch-precompile raises, and the exit status the command line gives each.

One module for all of them, as cibuildwheel's ``errors.py`` and auditwheel's ``error.py`` are: a
newcomer finds every error here, grouped by the side that raises it (shared, protocol, run, child,
build, tools), and no two share a name. One base, ``HatchPrecompileError`` (not ``PrecompileError``:
torch has ``torch.compiler.PrecompileError``, and a build's or a step's code meets both); each
subclass carries its ``exit_code``, so ``hatch-precompile``'s ``main`` has one ``except`` for all
of them. The run side's own reasons (a skip, a refusal) derive from it too, though ``load()`` never
lets one out. A module's own control-flow exception, never seen outside it, stays in that module,
private. Standard library only: this is the bottom layer, under ``protocol/``.
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_FOUND = 1  # `verify` found a miss, `report` found no artifacts
EXIT_USAGE = 2  # a usage error, a package not installed, a workload that raised
EXIT_WORKLOAD_FAILED = 3  # a build's or verify's child: a workload raised
EXIT_INTERRUPTED = 130


# -- shared ------------------------------------------------------------------------------------------


class HatchPrecompileError(Exception):
    """An error hatch-precompile reports in one line; the command line exits with ``exit_code``."""

    exit_code = EXIT_USAGE


class PrecompileWarning(UserWarning):
    """Precompiled caches, a step or the per-user store were not used; the program compiles as usual."""


# -- protocol: the files every side reads ----------------------------------------------------------


class ManifestError(HatchPrecompileError):
    """The manifest cannot be trusted; nothing it names is used."""


class ChildResultError(HatchPrecompileError):
    """A child's result.json is missing, unreadable or of another format."""


class ContractError(HatchPrecompileError, ValueError):
    """A step's contract file this hatch-precompile cannot serve; the message says why."""


class ServedError(HatchPrecompileError, ValueError):
    """A served-compiles index (``dynamo/served.json``) this hatch-precompile cannot serve; the message says why."""


# -- run: what every ``import pkg`` runs -----------------------------------------------------------


class Skip(HatchPrecompileError):
    """Stop loading, with this reason: the one way the run side says "not here, and why"."""


class GateValueError(HatchPrecompileError, ValueError):
    """An environment switch or the preferences file holds a value that is neither on nor off."""


class PreferencesError(HatchPrecompileError, ValueError):
    """The preferences file cannot be read or holds a value that is not a switch."""


class Untrusted(HatchPrecompileError, PermissionError):
    """A dir or file another account could have written; the message names its owner or mode."""


class Unidentified(HatchPrecompileError):
    """The GPU cannot be named without initialising CUDA; the message says why."""


class StepRefused(HatchPrecompileError):
    """This process cannot run an exported step for a call; the message says why, ``kind`` which of
    the contract's parts it broke (one of protocol/step_file.py's refusal kinds)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class DynamoEntryRefused(HatchPrecompileError):
    """torch did not take a shipped Dynamo cache entry; the message says why (the function is traced, as without it)."""


class DynamoEntryNotYet(DynamoEntryRefused):
    """torch could not rebuild a shipped entry's guards from what this process holds so far (a registry a
    library fills as its models are made); the install is tried again at the function's first call."""


# -- child: the processes a build, verify and snoop start -------------------------------------------


class ChildError(HatchPrecompileError):
    """A child process did not report: it timed out, crashed, or wrote no result."""

    def __init__(self, workload: str | None, detail: str) -> None:
        self.workload = workload  # the workload running when it stopped, if one was
        self.detail = detail
        super().__init__(detail)


class LoaderCrashed(HatchPrecompileError):
    """AOTInductor's loader took its process down (a signal) or hung; ``how`` says which, e.g. "SIGSEGV"."""

    def __init__(self, how: str, environment: dict[str, Any], output: str) -> None:
        self.how, self.environment, self.output = how, environment, output
        device = environment.get("device")
        on = "the CPU" if device == "cpu" else f"{device} (CUDA {environment.get('cuda')})"
        super().__init__(f"torch {environment.get('torch')}'s AOTInductor loader {how} opening and running the "
                         f"package on {on}, in a process of its own")


class LoaderRefused(HatchPrecompileError):
    """AOTInductor's loader raised in the proving child (a refusal, not a crash); the message is its error."""


# -- build: what a wheel build runs --------------------------------------------------------------------


class OptionError(HatchPrecompileError, ValueError):
    """Options of the table are wrong: one line each in ``problems``, the message is all of them."""

    def __init__(self, *problems: str) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(problems))


class TargetEnvError(HatchPrecompileError):
    """``HATCH_PRECOMPILE_TARGET`` names no usable environment."""


class WorkloadFailed(HatchPrecompileError):
    """A workload raised, crashed or timed out, or needs a GPU this build lacks: the workload's fault."""

    def __init__(
        self, workload: str | None, detail: str, missing_module: str | None = None, no_gpu: str | None = None
    ) -> None:
        self.workload = workload
        self.detail = detail
        self.missing_module = missing_module  # the module a failed import did not find
        self.no_gpu = no_gpu  # why this build has no usable GPU, when the workload needed one
        where = f"workload {workload!r}" if workload else "the precompile child process"
        super().__init__(f"{where} failed: {detail}")


class Unusable(HatchPrecompileError):
    """This torch cannot make trustworthy artifacts (too old, or its environment key is unreadable)."""


class CannotCompile(Unusable):
    """This machine cannot build C++ kernels (no working compiler, no Python headers)."""


class Instability(HatchPrecompileError):
    """A graph break or recompile that the project set ``graph-breaks`` or ``recompiles = "error"`` for."""


class ElfUnreadable(HatchPrecompileError):
    """A file that looks like ELF cannot be read as one."""


class MissingTool(HatchPrecompileError):
    """A publishing tool that tagging a wheel needs is not installed."""


class StepCaptureError(HatchPrecompileError, RuntimeError):
    """At build: torch could not capture the step by its route; the message says why and what to do."""


class StepMismatch(HatchPrecompileError, AssertionError):
    """At build: the captured step computed something else than the reference (fails the workload)."""


class NotAvailable(HatchPrecompileError):
    """This torch has no way to ship the step by its route (not the workload's fault)."""


# -- tools: the command line -----------------------------------------------------------------------


class UsageError(HatchPrecompileError):
    """A command line, option or target that names nothing usable."""


class NotFound(HatchPrecompileError):
    """``report`` found no artifacts: a finding, not a usage error."""

    exit_code = EXIT_FOUND


class TargetNotFound(HatchPrecompileError):
    """A target that names nothing usable; the message says what was looked for."""


class WheelError(HatchPrecompileError):
    """A wheel that cannot be read, or lacks what every wheel has."""


class VerifyError(HatchPrecompileError):
    """``verify`` could not run the workloads at all (as opposed to finding misses)."""


class WarmError(HatchPrecompileError):
    """``warm`` stored nothing; the message says why."""


class BakeError(HatchPrecompileError):
    """The wheel cannot be baked; the message names the wheel, option or file, and why."""


class MergeError(HatchPrecompileError):
    """The wheels cannot be merged; the message names the first reason."""


class SnoopError(HatchPrecompileError):
    """``snoop`` could not run the program at all; the message says why."""
