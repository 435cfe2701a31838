"""``save_step``: a workload ships a whole step, captured at build by the route that fits it.

- **Inference** (saved under ``torch.no_grad()``/``torch.inference_mode()``, every module argument
  in ``eval()``): exported with ``torch.export`` and compiled by AOTInductor (build/export.py),
  run at import by torch's C++ loader with the caller's weights: no compiler in the user's
  process (run/exported.py).
- **Anything else** (a training step): ``torch.compiler.precompile`` (torch 2.14+): no Dynamo at
  the first call, still Inductor's runtime (run/steps.py).

Either way the captured step is run on changed weights and inputs and compared with ``fn`` before
it is stored; a difference fails the workload (StepMismatch). A capture torch refuses fails it too
(StepCaptureError), naming the step, the route and torch's reason, unless the workload asked for
``on_failure="warn"``: then the step is not shipped, and ``load_step`` runs its fallback.

Outside a build this does nothing (a workload runs by hand as it is). Under ``hatch-precompile
verify`` it runs the shipped step the way users get it and compares it with ``fn``. Runs in the
child process only; never on ``import pkg``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.errors import PrecompileError
from hatch_precompile.protocol import NO_STEPS_VAR, ON_FAILURE, STEP_CHECKS, check_artifact_name, step_files
from hatch_precompile.run import contract, variables

CONTRACT_FORMAT = 1
PRECOMPILE_ROUTE = "precompile"


class StepMismatch(PrecompileError, AssertionError):
    """At build: the captured step computed something else than the reference (fails the workload)."""


class StepCaptureError(PrecompileError, RuntimeError):
    """At build: torch could not capture the step by its route; the message says why and what to do."""


# What the workload ran under `hatch-precompile verify`: one record per step (tools/replay.py).
verified: list[dict[str, Any]] = []


def save_step(name: str, fn: Callable[..., Any], *args: Any, check: str = "eager", dynamic_shapes: Any = None,
              on_failure: str = "error") -> Path | None:
    """Ship ``fn(*args)`` as the package's step ``name`` when called from a build's workload.

    ``fn`` is the whole step: ``fn(model, x, y)`` that returns the loss after ``backward()``, or a
    forward. Called under ``torch.no_grad()`` with every module in ``eval()``, it is exported
    (AOTInductor) and ``dynamic_shapes`` (torch.export's form: one entry per argument of ``fn``,
    None for a module) says which dims may vary and how far; else it is captured with
    ``torch.compiler.precompile`` (torch 2.14+). The capture runs on copies: the workload's model
    and tensors are left as they were. ``check="compile"`` compares with ``torch.compile(fn)``
    instead of eager ``fn``, for steps whose randomness differs between the two.

    Returns the path of the stored step, or None where nothing was stored (outside a build, a
    torch without the route, ``on_failure="warn"``).
    """
    check_artifact_name(name, "step")
    if check not in STEP_CHECKS:
        raise ValueError(f"save_step({name!r}, ...): check={check!r} must be one of {', '.join(STEP_CHECKS)}")
    if on_failure not in ON_FAILURE:
        raise ValueError(f"save_step({name!r}, ...): on_failure={on_failure!r} must be one of {', '.join(ON_FAILURE)}")
    if variables.steps_verify():
        _verify(name, fn, args, check)
        return None
    directory = variables.steps_dir()
    if not directory:
        return None
    if variables.no_steps():
        _note(f"step {name!r} not captured: {NO_STEPS_VAR} is set; load_step() falls back to torch.compile")
        return None
    out = Path(directory)
    if (out / Path(step_files(name)["json"]).name).exists():
        raise ValueError(f"save_step({name!r}, ...): a step named {name!r} was already saved by this build")
    import torch

    exported = inference(args)
    if dynamic_shapes is not None and not exported:
        raise ValueError(f"save_step({name!r}, ...): dynamic_shapes is for an exported step: save it under "
                         "torch.no_grad() with its modules in eval(); a training step is captured for its shapes")
    route = "aotinductor" if exported else PRECOMPILE_ROUTE
    if exported:
        from hatch_precompile.build import export

        shapes = export.input_shapes(name, fn, args, dynamic_shapes)  # the author's mistakes, as they are
    try:
        if exported:
            return export.save(name, fn, args, shapes, check, out)
        return _save_precompiled(name, fn, args, check, out)
    except StepMismatch:
        if on_failure == "error":
            raise
        _skipped(name, route, "its captured step computes something else than the reference (above)")
    except NotAvailable as exc:
        _note(f"step {name!r} not captured: {exc}; load_step() falls back to torch.compile")
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        if on_failure == "error":
            raise StepCaptureError(
                f"step {name!r} ({route} route): torch {torch.__version__} could not capture it: {reason}. "
                + _what_to_do(route)) from exc
        _skipped(name, route, f"torch {torch.__version__} could not capture it: {reason}")
    return None


class NotAvailable(PrecompileError):
    """This torch has no way to ship the step by its route (not the workload's fault)."""


def _what_to_do(route: str) -> str:
    if route == PRECOMPILE_ROUTE:
        return ("The training route traces the whole step: code that branches on a tensor's value breaks it. "
                "For inference, save the step under torch.no_grad() with the model in eval() (the AOTInductor "
                "route); else pass on_failure=\"warn\" to ship the package without it (load_step() then runs "
                "torch.compile)")
    return ("Fix what torch.export names above (torch.export's docs list the rewrites), or pass "
            "on_failure=\"warn\" to ship the package without it (load_step() then runs torch.compile)")


def _skipped(name: str, route: str, why: str) -> None:
    _note(f"step {name!r} ({route} route) not shipped: {why}; load_step() falls back to torch.compile "
          "(on_failure=\"warn\")")


def _note(text: str) -> None:
    print(f"precompile: warning: {text}", flush=True)


def inference(args: tuple) -> bool:
    """Whether a step called with ``args`` now is an inference step: grad off, every module in eval()."""
    import torch

    modules = [a for a in args if isinstance(a, torch.nn.Module)]
    return not torch.is_grad_enabled() and all(not m.training for a in modules for m in a.modules())


def _save_precompiled(name: str, fn: Callable, args: tuple, check: str, out: Path) -> Path:
    import torch

    precompile = getattr(torch.compiler, "precompile", None)
    if precompile is None:
        raise NotAvailable(f"torch {torch.__version__} has no torch.compiler.precompile (2.14+)")
    record = {"format": CONTRACT_FORMAT, "route": PRECOMPILE_ROUTE, "torch": torch.__version__,
              "modes": contract.modes(), "args": contract.describe(args), "check": check}
    code, cache = precompile(fn, *copy.deepcopy(args))
    check_against_reference(name, fn, args, precompile.load(code, cache), check)
    out.mkdir(parents=True, exist_ok=True)
    files = step_files(name)
    (out / Path(files["py"]).name).write_text(code)
    (out / Path(files["cache"]).name).write_bytes(cache)
    (out / Path(files["json"]).name).write_text(json.dumps(record, indent=1))
    return out / Path(files["py"]).name


def _verify(name: str, fn: Callable, args: tuple, check: str) -> None:
    """Under verify: the shipped step, loaded as users get it, against ``fn`` on changed arguments.
    A step the set does not ship is left alone: the workload's own calls show what it compiles."""
    from hatch_precompile.run import artifacts, steps

    package = variables.package() or ""
    try:
        found = artifacts.find(package)
    except artifacts.Skip:
        found = None
    shipped = found is not None and name in found.manifest.steps
    record: dict[str, Any] = {"name": name, "route": None, "reason": None, "problems": [], "shipped": shipped}
    if shipped:
        step = steps.load_step(package, name, fn)
        try:
            check_against_reference(name, fn, args, step, check)
        except StepMismatch as exc:
            record["problems"].append(str(exc))
        record["route"], record["reason"] = step.route, step.reason
    verified.append(record)
    return None


# -- the check: the captured step against the reference -----------------------------------------


def check_against_reference(name: str, fn: Callable, args: tuple, loaded: Callable, check: str,
                            changed: tuple | None = None) -> None:
    """Run the loaded step and the reference on equal copies of changed arguments: a value the
    trace baked in (a tensor read outside the arguments) shows as a difference, and so does a
    branch on a value wherever the changed values take the other branch."""
    import torch

    changed = _changed(args) if changed is None else changed
    reference_fn = torch.compile(fn) if check == "compile" else fn
    results = []
    for runner in (reference_fn, loaded):
        copies = copy.deepcopy(changed)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            value = runner(*copies)
        results.append((value, _state(copies)))
    (want, want_state), (got, got_state) = results
    problems = _compare(want, got, "the result") + _compare(want_state, got_state, "the arguments after the step")
    if problems:
        raise StepMismatch(
            f"step {name!r}: the captured step computes something else than {fn.__qualname__} run "
            f"{'eagerly' if check == 'eager' else 'with torch.compile'} on changed weights and inputs: "
            + "; ".join(problems[:5]).replace("{fn}", fn.__qualname__)
            + ". The step breaks its route's contract (a tensor read outside its arguments, a branch on a "
              "value, randomness: try check=\"compile\"); it is not shipped."
        )


def _changed(args: tuple) -> tuple:
    """Copies of ``args`` with other floating-point weights and inputs, a quarter of the entries of
    masks (bool, or integers all 0 or 1) flipped, and other integer inputs shuffled."""
    import torch

    copies = copy.deepcopy(args)
    generator = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for tensor in _tensors(copies):
            if tensor.is_floating_point():
                noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float32).to(tensor.device, tensor.dtype)
                tensor.mul_(1 + 0.1 * noise).add_(0.01 * noise)
            elif tensor.dtype == torch.bool or tensor.numel() > 1 and not tensor.is_complex() and _zero_one(tensor):
                flip = (torch.rand(tensor.shape, generator=generator) < 0.25).to(tensor.device)
                tensor.copy_(torch.where(flip, 1 - tensor.to(torch.int8), tensor.to(torch.int8)).to(tensor.dtype))
            elif tensor.numel() > 1 and not tensor.is_complex():
                order = torch.randperm(tensor.numel(), generator=generator).to(tensor.device)
                tensor.copy_(tensor.flatten()[order].reshape(tensor.shape))
    return copies


def _zero_one(tensor: Any) -> bool:
    """An integer tensor of zeros and ones: a mask, whose values branches read (padding, packing)."""
    return bool(((tensor == 0) | (tensor == 1)).all())


def _tensors(value: Any) -> list:
    import torch

    if isinstance(value, torch.nn.Module):
        return [*value.parameters(), *value.buffers()]
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _state(args: tuple) -> list:
    """What a step can change in its arguments: tensors' values and parameters' gradients."""
    import torch

    state = []
    for arg in args:
        if isinstance(arg, torch.nn.Module):
            state += [(n, p.detach().clone(), None if p.grad is None else p.grad.clone()) for n, p in arg.named_parameters()]
            state += [(n, b.clone(), None) for n, b in arg.named_buffers()]
        else:
            state += [(None, t.detach().clone(), None) for t in _tensors(arg)]
    return state


def _compare(want: Any, got: Any, where: str) -> list[str]:
    import torch

    if isinstance(want, torch.Tensor) or isinstance(got, torch.Tensor):
        if not (isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor)):
            return [f"{where} is {type(got).__name__}, expected {type(want).__name__}"]
        if want.requires_grad != got.requires_grad:
            return [f"{where} {'needs' if want.requires_grad else 'does not need'} gradients from {{fn}} but "
                    f"{'does' if got.requires_grad else 'does not'} from the captured step (call backward() inside the step)"]
        try:
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4, equal_nan=True)
        except AssertionError as exc:
            return [f"{where}: {str(exc).splitlines()[0]}"]
        return []
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)) and len(want) == len(got):
        return [p for i, (w, g) in enumerate(zip(want, got)) for p in _compare(w, g, f"{where}[{i}]")]
    if isinstance(want, dict) and isinstance(got, dict) and want.keys() == got.keys():
        return [p for k in want for p in _compare(want[k], got[k], f"{where}[{k!r}]")]
    if hasattr(want, "to_tuple") and hasattr(got, "to_tuple"):  # transformers' ModelOutput
        return _compare(want.to_tuple(), got.to_tuple(), where)
    if want is None and got is None or (isinstance(want, contract.VALUES) and want == got):
        return []
    return [f"{where} is {type(got).__name__} {str(got)[:80]}, expected {type(want).__name__} {str(want)[:80]}"]
