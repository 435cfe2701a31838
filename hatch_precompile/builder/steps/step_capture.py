"""``save_step``: a workload ships a whole step, captured at build by the route that fits it.

- **Inference** (saved under ``torch.no_grad()``/``torch.inference_mode()``, every module argument
  in ``eval()``): exported with ``torch.export`` and compiled by AOTInductor (builder/steps/export.py),
  run at import by torch's C++ loader with the caller's weights: no compiler in the user's
  process (run/steps/exported_step.py).
- **A loss** (``backward=True``): its forward and backward exported as one graph (AOTInductor),
  run with the caller's tensors, as inference is; where torch cannot export it, the route below.
- **Anything else** (a training step): ``torch.compiler.precompile`` (torch 2.14+): no Dynamo at
  the first call, still Inductor's runtime (run/steps/shipped_steps.py).

Either way the captured step is run on changed weights and inputs and compared with ``fn`` before
it is stored; a difference fails the workload (StepMismatch). A capture torch refuses fails it too
(StepCaptureError), naming the step, the route and torch's reason. Unless the workload asked for
``on_failure="warn"``: then the step is not shipped, and ``load_step`` runs its fallback. A loss
(``backward=True``) is the exception for a capture torch refuses: which torch exports a loss's
backward moves from release to release (torch 2.8 refuses the sample's dynamic batch in the
joint graph, 2.13 takes it), so a refusal on both of its routes is said and the fallback serves,
warm, rather than failing a user's install; a loss either route captures wrongly fails it
(StepMismatch, naming both routes). A torch that lacks a route (NotAvailable: too old, or its
loader crashed in the package's prover) never fails the workload: the build says so, and the
next route or the fallback serves.

Outside a build this does nothing (a workload runs by hand as it is). Under ``hatch-precompile
verify`` it runs the shipped step the way users get it and compares it with ``fn``
(builder/steps/step_verify.py). Runs in the child process only; never on ``import pkg``.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.builder.reporter import STDOUT
from hatch_precompile.builder.steps import step_verify
from hatch_precompile.builder.steps.step_check import check_against_reference, with_backward
from hatch_precompile.child import progress
from hatch_precompile.errors import NotAvailable, StepCaptureError, StepMismatch
from hatch_precompile.protocol import NO_STEPS_VAR, ON_FAILURE, STEP_CHECKS, check_artifact_name, step_files
from hatch_precompile.protocol.step_file import CONTRACT_FORMAT, EXPORTED
from hatch_precompile.protocol.step_file import PRECOMPILE as PRECOMPILE_ROUTE
from hatch_precompile.run import variables
from hatch_precompile.run.steps import call_contract, shipped_steps


@dataclass
class _ProcessState:
    """What save_step remembers for a build's child, which asks never_saved() once the workloads ran.
    It lives as long as the process: the workloads' own code calls save_step, with nothing to hand it."""

    saved: set[str] = field(default_factory=set)
    """The names save_step was called with, stored or not (the build says why not)."""


_this_process = _ProcessState()


def save_step(name: str, fn: Callable[..., Any], *args: Any, check: str = "eager", dynamic_shapes: Any = None,
              on_failure: str = "error", backward: bool = False) -> Path | None:
    """Ship ``fn(*args)`` as the package's step ``name`` when called from a build's workload.

    ``fn`` is the whole step: ``fn(model, x, y)`` that returns the loss after ``backward()``, or a
    forward, or with ``backward=True`` one that returns the loss and leaves ``backward()`` to
    hatch-precompile: saved with grad enabled and the modules in ``train()``, its forward and
    backward are exported as one graph (AOTInductor) that ``load_step(..., backward=True)`` runs
    with the caller's tensors, no compiler in the process; ``dynamic_shapes`` works as for
    inference. Where torch cannot export it the build says why, and the step with its backward
    is captured by ``torch.compiler.precompile`` (torch 2.14+). Where that captures something else
    than ``fn``, the build fails naming the step and both routes (StepMismatch; with
    ``on_failure="warn"`` it says so instead); where torch cannot capture it by either route, the
    build says why and ``load_step`` falls back to ``torch.compile(fn)`` and ``backward()``, warm
    where the workload called the fallback. Called under ``torch.no_grad()`` with every module in
    ``eval()``, it is exported
    (AOTInductor) and ``dynamic_shapes`` (torch.export's form: one entry per argument of ``fn``,
    None for a module) says which dims may vary and how far; else it is captured with
    ``torch.compiler.precompile`` (torch 2.14+). The capture runs on copies: the workload's model
    and tensors are left as they were. ``check="compile"`` compares with ``torch.compile(fn)``
    instead of eager ``fn``, for steps whose randomness differs between the two.

    Returns the path of the stored step, or None where nothing was stored (outside a build, a
    torch without the route, ``on_failure="warn"``).
    """
    check_artifact_name(name, "step")
    _this_process.saved.add(name)
    if check not in STEP_CHECKS:
        raise ValueError(f"save_step({name!r}, ...): check={check!r} must be one of {', '.join(STEP_CHECKS)}")
    if on_failure not in ON_FAILURE:
        raise ValueError(f"save_step({name!r}, ...): on_failure={on_failure!r} must be one of {', '.join(ON_FAILURE)}")
    if variables.steps_verify():
        step_verify.verify(name, fn, args, check, backward)
        return None
    directory = variables.steps_dir()
    if not directory:
        return None
    if variables.no_steps():
        STDOUT.warning(f"step {name!r} not captured: {NO_STEPS_VAR} is set; load_step() falls back to torch.compile")
        return None
    out = Path(directory)
    if (out / Path(step_files(name)["json"]).name).exists():
        raise ValueError(f"save_step({name!r}, ...): a step named {name!r} was already saved by this build")
    import torch

    if backward and not torch.is_grad_enabled():
        raise ValueError(f"save_step({name!r}, ..., backward=True): save a training step with grad enabled (not "
                         "under torch.no_grad() or torch.inference_mode())")
    exported = backward or is_inference_step(args)  # a loss's forward and backward are exported as one graph
    if dynamic_shapes is not None and not exported:
        raise ValueError(f"save_step({name!r}, ...): dynamic_shapes is for an exported step: save it under "
                         "torch.no_grad() with its modules in eval(); a training step is captured for its shapes")
    route = EXPORTED if exported else PRECOMPILE_ROUTE
    if exported:
        from hatch_precompile.builder.steps import export

        shapes = export.input_shapes(name, fn, args, dynamic_shapes)  # the author's mistakes, as they are
    try:
        with progress.within(f"capturing step {name!r} ({route} route)"):
            if exported:
                return export.save(name, fn, args, shapes, check, out, training=backward)
            return _save_precompiled(name, fn, args, check, out)
    except StepMismatch:
        if on_failure == "error":
            raise
        _skipped(name, route, "its captured step computes something else than the reference (above)")
    except NotAvailable as exc:
        if backward and _has_precompile(torch):
            STDOUT.warning(f"step {name!r} not exported: {exc}; capturing it with torch.compiler.precompile instead")
            return _save_loss_precompiled(name, fn, args, check, out, on_failure, f"not available: {exc}")
        STDOUT.warning(f"step {name!r} not captured: {exc}; load_step() falls back to torch.compile"
                       + (" and backward()" if backward else ""))
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        if backward:  # a training step keeps its other routes: precompile (2.14+), then the shipped caches
            where = _user_frame(exc)
            failed = f"torch {torch.__version__} could not export it{f' at {where}' if where else ''}: {reason}"
            next_route = ("capturing it with torch.compiler.precompile instead" if _has_precompile(torch)
                          else f"load_step() runs {_FALLBACK}")
            STDOUT.warning(f"step {name!r} (aotinductor route, forward and backward): {failed}; {next_route}")
            return _save_loss_precompiled(name, fn, args, check, out, on_failure, failed) if _has_precompile(
                torch) else None
        elif on_failure == "error":
            raise StepCaptureError(
                f"step {name!r} ({route} route): torch {torch.__version__} could not capture it: {reason}. "
                + _what_to_do(route)) from exc
        else:
            _skipped(name, route, f"torch {torch.__version__} could not capture it: {reason}")
    return None


_FALLBACK = "torch.compile and backward() (warm where the workload called the step's fallback)"


def _has_precompile(torch: Any) -> bool:
    return getattr(torch.compiler, "precompile", None) is not None


def _save_loss_precompiled(name: str, fn: Callable, args: tuple, check: str, out: Path, on_failure: str,
                           failed: str) -> Path | None:
    """A loss step torch could not export (``failed``: why): the loss and its backward() as one step,
    captured by torch.compiler.precompile. Where that captures something else than ``fn``: with
    ``on_failure="error"``, StepMismatch naming both routes. Where torch cannot capture it either:
    None, said (the fallback runs from the caches) -- which torch exports a loss's backward, and how,
    moves from release to release, and a user's install must not fail on one that cannot."""
    import torch

    try:
        with progress.within(f"capturing step {name!r} ({PRECOMPILE_ROUTE} route)"):
            return _save_precompiled(name, with_backward(fn), args, check, out)
    except NotAvailable as exc:
        STDOUT.warning(f"step {name!r} (precompile route) not captured: {exc}; load_step() runs {_FALLBACK}")
        return None
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        what = str(exc) if isinstance(exc, StepMismatch) else (
            f"torch {torch.__version__} could not capture it either: {type(exc).__name__}: {first_line}")
        if on_failure == "error" and isinstance(exc, StepMismatch):
            raise StepMismatch(_neither(name, failed, what)) from exc
        STDOUT.warning(f"step {name!r} (precompile route): {what}; load_step() runs {_FALLBACK}")
        return None


def _neither(name: str, exported: str, precompiled: str) -> str:
    """Why neither route ships loss step ``name`` (the second computed something else), and what to do."""
    return (f"step {name!r} (a loss, backward=True) can be shipped by neither route: aotinductor route (forward and "
            f"backward): {exported}; precompile route: {precompiled}. Fix what torch names above, or pass "
            f"on_failure=\"warn\" to ship the package without it: load_step() then runs {_FALLBACK}")


def _user_frame(exc: BaseException) -> str | None:
    """``file:line`` of the innermost frame of the error's traceback outside torch and hatch-precompile."""
    import traceback

    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if "/torch/" not in frame.filename and "/hatch_precompile/" not in frame.filename:
            found = f"{frame.filename}:{frame.lineno}"
    return found


def _what_to_do(route: str) -> str:
    if route == PRECOMPILE_ROUTE:
        return ("The training route traces the whole step: code that branches on a tensor's value breaks it. "
                "For inference, save the step under torch.no_grad() with the model in eval() (the AOTInductor "
                "route); else pass on_failure=\"warn\" to ship the package without it (load_step() then runs "
                "torch.compile)")
    return ("Fix what torch.export names above (torch.export's docs list the rewrites), or pass "
            "on_failure=\"warn\" to ship the package without it (load_step() then runs torch.compile)")


def _skipped(name: str, route: str, why: str) -> None:
    STDOUT.warning(f"step {name!r} ({route} route) not shipped: {why}; load_step() falls back to torch.compile "
                   "(on_failure=\"warn\")")


def is_inference_step(args: tuple) -> bool:
    """Whether a step called with ``args`` now is an inference step: grad off, every module in eval()."""
    import torch

    modules = [a for a in args if isinstance(a, torch.nn.Module)]
    return not torch.is_grad_enabled() and all(not m.training for a in modules for m in a.modules())


def _save_precompiled(name: str, fn: Callable, args: tuple, check: str, out: Path) -> Path:
    import torch

    if not _has_precompile(torch):
        raise NotAvailable(f"torch {torch.__version__} has no torch.compiler.precompile (2.14+)")
    precompile = torch.compiler.precompile
    record = {"format": CONTRACT_FORMAT, "route": PRECOMPILE_ROUTE, "torch": torch.__version__,
              "modes": call_contract.process_modes(), "args": call_contract.describe(args), "check": check}
    code, cache = precompile(fn, *copy.deepcopy(args))
    check_against_reference(name, fn, args, precompile.load(code, cache), check)
    out.mkdir(parents=True, exist_ok=True)
    files = step_files(name)
    (out / Path(files["py"]).name).write_text(code)
    (out / Path(files["cache"]).name).write_bytes(cache)
    (out / Path(files["json"]).name).write_text(json.dumps(record, indent=1))
    return out / Path(files["py"]).name


def never_saved(package: str | None) -> list[str]:
    """What the build says of each step of ``package`` that load_step declared in this process and
    the workload never saved: it ships no step, by the author's choice, and users get its fallback."""
    said = []
    for (owner, name), warmed in sorted(shipped_steps.this_process.declared.items()):
        if name in _this_process.saved or (package and owner != package):
            continue
        said.append(f"step {name!r} is declared by load_step but the workload never saved it: it runs its fallback, "
                    + ("warm where the workload called it" if warmed else
                       "which the workload never called either, so it compiles at each user's first call (call "
                       "the step or its .fallback in the workload to ship its graphs warm)"))
    return said
