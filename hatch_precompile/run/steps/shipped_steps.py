"""``load_step``: a package's step as it was shipped, by the route the build captured it with.

At build a workload saved the step (builder/steps/step_capture.py): an inference step as an AOTInductor package
(run/steps/exported_step.py: no Dynamo or Inductor in this process), a training step with
``torch.compiler.precompile`` (torch 2.14+: no Dynamo at the first call). ``load_step(package,
name, fn)`` returns a callable that runs the shipped step where the arguments keep its contract
(run/steps/call_contract.py) and the package's artifacts were installed for this machine, and
``torch.compile(fn)`` everywhere else: another torch the step was not proven on, a shape outside
the exported ranges, a module in train() mode, a Python value or a mode that differs, a loader
that refuses. ``step.route`` says which ran, ``step.reason`` why the fallback did. A failed
shortcut costs time, never correctness; it is never silent either: the first call in a process
that a shipped step refuses, of each kind (inputs, modes, module, settings, loader), warns once
with the reason and the fix (a PrecompileWarning). A refusal the author planned for (a module in
train() for an inference step) is only logged, and so is a step no set of the package ships (the
author's choice at build, which the build's output states): nothing the user changes would serve it.
"""

from __future__ import annotations

import json
import logging
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from hatch_precompile.errors import ContractError, PrecompileWarning, Skip, StepRefused
from hatch_precompile.protocol import check_artifact_name, step_files
from hatch_precompile.protocol.step_file import (
    ARGUMENTS,
    EXPORTED,
    FALLBACK,
    INPUTS,
    LOADER,
    MODES,
    MODULE,
    PLANNED,
    PRECOMPILED,
    SETTINGS,
    read_contract,
)
from hatch_precompile.run import load_caches
from hatch_precompile.run.sets import artifacts, verdict
from hatch_precompile.run.steps import call_contract

# Why a call was refused, by kind (run/steps/exported_step.py's, and the precompile route's own): the fix a
# warning gives. The author's planned refusal (train mode) has none: it is logged, not warned.
FIXES = {
    MODES: "call it under the process modes the workload saved it with (torch.no_grad(), the default dtype, "
           "autocast)",
    INPUTS: "call it with inputs of the dtypes, layouts and structure the workload gave save_step(), and dims "
            "inside its dynamic_shapes (widen those and rebuild to serve more)",
    MODULE: "serve a model of the class, submodules and tensor shapes the workload saved the step with, or "
            "rebuild the package with the model you serve",
    SETTINGS: "serve the model with the settings the step's trace read at build, or rebuild the package with "
              "the model as you serve it",
    LOADER: "rebuild the package for this torch and machine; `hatch-precompile verify` shows what it refuses",
    ARGUMENTS: "call it with arguments as the workload's save_step() gave them",
}
# What the default fallback does, in every message about one: the workload's calls warmed it.
FALLBACK_DOES = ("Its fallback is torch.compile(fn): warm from the shipped caches where the package's workload made "
                 "that call, compiled otherwise.")


@dataclass
class ProcessState:
    """What every step of this process shares. It lives as long as the process: torch's caches and
    Python's warnings are the process's, and a build's or snoop's child reads the counts here once
    the workloads, which know nothing of it, have run."""

    served: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """Calls each route served, by (package, step, route): what snoop counts (child/snoop_child.py)."""
    declared: dict[tuple[str, str], bool] = field(default_factory=dict)
    """Each (package, step) load_step made, and whether its fallback ran: in a build's child, what tells
    the build a step declared here that the workload never saved (builder/steps/step_capture.py)."""
    warned: set[tuple[str, str, str]] = field(default_factory=set)
    """Each (package, step, kind) of refusal warned of: one warning each."""
    loading: threading.Lock = field(default_factory=threading.Lock)
    """Held while a step loads: precompile.load primes torch's process-wide caches, one at a time."""


this_process = ProcessState()


class Step:
    """``fn`` as shipped: the shipped step where its contract holds, ``fallback`` elsewhere.

    ``route`` says what the last call ran: "aotinductor" (the exported package), "precompiled"
    (torch.compiler.precompile), "fallback", or None before a call; ``reason`` why the fallback
    ran (None when it did not).
    """

    def __init__(self, package: str, name: str, fn: Callable[..., Any], fallback: Callable[..., Any] | None,
                 dynamic: bool | None = None, backward: bool = False):
        self.package, self.name, self.fn = package, name, fn
        self._fallback = fallback
        self._default_fallback = fallback is None
        self._dynamic = dynamic
        this_process.declared.setdefault((package, name), False)
        self.backward = backward  # fn returns a loss: a call leaves its gradients in .grad
        self._lock = threading.Lock()
        self._resolved = False
        self._contract: dict[str, Any] | None = None
        self._files: dict[str, bytes] | None = None
        self._loaded: Any = None  # the precompiled callable, or the ExportedStep
        self._unavailable: str | None = None  # why the shipped step cannot run in this process
        self.route: str | None = None
        self.reason: str | None = None

    def __repr__(self) -> str:
        return f"<hatch_precompile step {self.package}:{self.name} route={self.route}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        shipped, why, route, kind = self._shipped_for(args)
        if kwargs:  # the capture's calling convention is positional
            why, kind = f"called with keyword arguments ({', '.join(kwargs)})", ARGUMENTS if shipped is not None else None
        elif shipped is not None:
            if route == EXPORTED:

                try:
                    result = shipped.call(args)
                except StepRefused as exc:
                    why, kind = str(exc), exc.kind
                else:
                    return self._ran(EXPORTED, None, result)
            else:
                import torch

                try:
                    result = shipped(*args)
                except torch.compiler.precompile.PrecompileError as exc:  # torch's own checks, before any work
                    why, kind = f"torch.compiler.precompile refused the arguments: {exc}", ARGUMENTS
                else:
                    return self._ran(PRECOMPILED, None, result)
        if kind is not None:
            self._refused(kind, why or "")
        return self._run_fallback(why, args, kwargs)

    def _run_fallback(self, why: str | None, args: tuple, kwargs: dict[str, Any]) -> Any:
        self._ran(FALLBACK, why, None)
        result = self.fallback(*args, **kwargs)
        if not self.backward:
            return result
        result.backward()  # what the shipped training step does: gradients in .grad, the loss detached
        return result.detach()

    def _refused(self, kind: str, why: str) -> None:
        """A shipped step refused a call: said once per kind in this process (a PrecompileWarning with
        the fix), logged only where the author planned it; never raises, even under -W error."""
        key = (self.package, self.name, kind)
        if kind == PLANNED or key in this_process.warned:
            load_caches.log.debug("step %s:%s ran its fallback: %s", self.package, self.name, why)
            return
        this_process.warned.add(key)
        message = (f"hatch-precompile: {self.package}'s step {self.name!r} ran its fallback instead of its shipped "
                   f"step: {why}. {self._fallback_does()} To use the shipped step, "
                   f"{FIXES.get(kind, FIXES[ARGUMENTS])}. (Said once per kind of refusal; `step.reason` has each call's.)")
        try:
            warnings.warn(message, PrecompileWarning, stacklevel=4)
        except Exception:  # warnings turned into errors (-W error): the call still falls back
            load_caches.log.debug("step %s: the refusal could not be reported", self.name, exc_info=True)

    def _ran(self, route: str, reason: str | None, result: Any) -> Any:
        with self._lock:
            self.route, self.reason = route, reason
            this_process.served[(self.package, self.name, route)] += 1
        return result

    def _fallback_does(self) -> str:
        return FALLBACK_DOES if self._default_fallback else "Its fallback is the one load_step() was given."

    @property
    def fallback(self) -> Callable[..., Any]:
        with self._lock:
            this_process.declared[(self.package, self.name)] = True  # the workload's call of it ships its graphs warm
            if self._fallback is None:
                from hatch_precompile.run.served import served_compile

                self._fallback = served_compile.compile_for(self.package, self.fn, dynamic=self._dynamic)
            return self._fallback

    def _shipped_for(self, args: tuple) -> tuple[Any, str | None, str | None, str | None]:
        """(the shipped step to run for ``args``, or None; why not; its route; the kind of a refusal
        of these arguments, None where no step can run here at all)."""
        with self._lock:
            if not self._resolved:
                self._resolved = True
                self._contract = self._read_contract()
            if self._contract is None:
                return None, self._unavailable, None, None
            route = self._contract.get("route")
            if route != EXPORTED:  # the exported step checks its own, faster (run/steps/exported_step.py)
                why = call_contract.mismatch(self._contract, args)
                if why is not None:
                    return None, why, route, MODES if why.startswith("the process modes") else ARGUMENTS
            if self._loaded is None and self._files is not None:
                with this_process.loading:
                    self._loaded = self._load()
            return self._loaded, self._unavailable, route, None

    def _read_contract(self) -> dict[str, Any] | None:
        """The step's contract where it can run here (its files read and checked), or None with
        ``reason`` set."""
        try:
            result = load_caches.load(self.package)  # the set it installed is for this torch and CPU
            if not result:
                return self._skip(f"the package's artifacts are not in use: {result.reason}", quiet=True)
            found = artifacts.find(self.package)
            files = step_files(self.name)
            if found is None or files["json"] not in found.manifest.files:
                return self._not_shipped(found)
            try:
                record = read_contract(json.loads(found.read(files["json"])), self.name)
            except (ContractError, ValueError) as exc:
                return self._skip(str(exc))
            if record.get("route") == EXPORTED:
                return self._exported_contract(record, found, files)
            import torch

            if getattr(torch.compiler, "precompile", None) is None:
                return self._skip(f"torch {torch.__version__} has no torch.compiler.precompile", quiet=True)
            self._files = {"py": found.read(files["py"]), "cache": found.read(files["cache"])}
            return record
        except Skip as skip:
            return self._skip(f"step {self.name!r}: {skip}")
        except Exception as exc:
            return self._skip(f"step {self.name!r}: {exc!r}")

    def _not_shipped(self, found: artifacts.ArtifactSet | None) -> dict[str, Any] | None:
        """The set in use has no such step. Shipped for other sets only, the environment decides, and
        the user can change it: said once. Shipped for none, the package's build did not save it (its
        output says why): the author's choice, which nothing here changes, so only logged."""
        elsewhere = [s for s in artifacts.all_sets(self.package)
                     if self.name in s.manifest.steps and (found is None or found.warmed or s.name != found.name)]
        if not elsewhere:
            return self._skip(f"no step named {self.name!r} was shipped: the package's build did not save one (its "
                              "output says why)", quiet=True)
        here = verdict.here()
        where = "; ".join(f"{s.name!r} ({verdict.problem(s.manifest, here) or 'a set this environment also fits'})"
                          for s in elsewhere)
        in_use = f" ({found.name!r})" if found is not None else ""
        return self._skip(f"no step named {self.name!r} was shipped for this environment's artifact set{in_use}; it "
                          f"was shipped for the set{'s' if len(elsewhere) > 1 else ''} {where}")

    def _exported_contract(self, record: dict[str, Any], found: artifacts.ArtifactSet,
                           files: dict[str, str]) -> dict[str, Any] | None:
        import torch

        from hatch_precompile.run.steps import exported_step

        problem = exported_step.proof_problem(record, torch)  # a loader that crashed in a build's prover never runs here
        if problem:
            return self._skip(f"its package is not opened in this process: {problem}")
        self._files = {"pt2": found.read(files["pt2"])}
        if files["constants"] in found.manifest.files:
            self._files["constants"] = found.read(files["constants"])
        return record

    def _load(self) -> Any:
        files, self._files = self._files or {}, None
        assert self._contract is not None
        if self._contract.get("route") == EXPORTED:
            from hatch_precompile.run.steps import exported_step

            try:
                return exported_step.ExportedStep(self.name, self._contract["export"], files["pt2"], files.get("constants"))
            except StepRefused as exc:
                self._contract = None
                self._skip(f"step {self.name!r} cannot run here: {exc}")
                return None
            except Exception as exc:
                self._contract = None
                self._skip(f"step {self.name!r} did not load: {exc!r}")
                return None
        import torch

        from hatch_precompile.run.torch_internals import settings

        try:
            with settings.quiet_logger("precompile-logger", _not_the_exec_warning):
                return torch.compiler.precompile.load(files["py"].decode(), files["cache"])
        except Exception as exc:
            self._contract = None
            self._skip(f"step {self.name!r} did not load: {exc!r}")
            return None

    def _skip(self, reason: str, quiet: bool = False) -> dict[str, Any] | None:
        """No shipped step here, for ``reason``: said once as a PrecompileWarning, only logged where
        ``quiet``. None, what the caller returns. The package's other caches stay in use."""
        self._unavailable = reason
        message = f"hatch-precompile: {self.package}'s step {self.name!r} runs its fallback: {reason}. {self._fallback_does()}"
        if quiet:
            load_caches.log.debug("%s", message)
            return None
        try:
            warnings.warn(message, PrecompileWarning, stacklevel=_outside_this_module())
        except Exception:  # warnings turned into errors (-W error): the step still falls back
            load_caches.log.debug("step %s: the skip could not be reported", self.name, exc_info=True)
        return None


def _outside_this_module() -> int:
    """The stacklevel of the first caller outside this module: the user's line that called the step."""
    import inspect

    frame, level = inspect.currentframe(), 1
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level - 1


def _not_the_exec_warning(record: logging.LogRecord) -> bool:
    """torch warns at every load that the code it runs is untrusted; this code is the package's own,
    checked against the sha256 its wheel's manifest lists, so the warning would only be noise."""
    return not str(record.msg).startswith("torch.compiler.precompile.load is about to EXEC")


def load_step(package: str, name: str, fn: Callable[..., Any], fallback: Callable[..., Any] | None = None, *,
              dynamic: bool | None = None, backward: bool = False) -> Step:
    """``fn`` as ``package`` shipped it under ``name`` (see Step); never raises for an artifact problem.

    Cheap at import: nothing is read before the first call. ``fallback`` (default
    ``torch.compile(fn, dynamic=dynamic)``, made on first need) runs wherever the shipped step
    cannot; ``dynamic=True`` makes it one graph for every size, as an exported step with dynamic
    dims serves them (the workload warms it by calling ``step.fallback`` once).

    ``backward=True``: ``fn`` returns a scalar loss and does not call ``backward()`` itself (as the
    workload's ``save_step(..., backward=True)`` saved it). A call then does what ``loss =
    fn(*args); loss.backward()`` does, by the shipped package of the forward and backward where it
    can and by ``fallback`` then ``backward()`` elsewhere: each gradient added to its parameter's
    ``.grad``, batch norm's statistics updated, the loss returned detached. The optimizer step stays
    the caller's.
    """
    check_artifact_name(name, "step")
    if not callable(fn):
        raise TypeError(f"load_step({package!r}, {name!r}, fn): fn must be callable, got {type(fn).__name__}")
    return Step(package, name, fn, fallback, dynamic, backward)
