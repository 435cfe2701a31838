"""The build's proof of a captured step: run it and its reference on changed arguments, compare.

Both routes (builder/steps/step_capture.py, builder/steps/export_proof.py) store a step only after ``check_against_reference``
found it computing what ``fn`` computes on copies of the arguments with other weights and inputs
(``changed_copies``): a value the trace baked in, or a branch the changed values take otherwise,
shows as a difference (StepMismatch).
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from hatch_precompile.errors import StepMismatch
from hatch_precompile.run.steps import call_contract


def with_backward(fn: Callable) -> Callable:
    """``fn`` (it returns a loss) as a training step runs it: the loss, then its backward; the
    detached loss returned, the gradients left in ``.grad``."""
    def step(*args: Any) -> Any:
        loss = fn(*args)
        loss.backward()
        return loss.detach()

    step.__qualname__ = getattr(fn, "__qualname__", "step")
    return step


def check_statistically(name: str, reference: Callable, loaded: Callable, args: tuple, seeds: int = 4) -> None:
    """For a step that draws random numbers (dropout), which the captured step draws otherwise
    than eager: over ``seeds`` runs on equal copies, the mean loss agrees within three standard
    errors (and 1%), and the mean gradient points the same way (cosine above 0.9)."""
    import torch

    losses: list[list[float]] = [[], []]
    grads: list[Any] = [None, None]
    for seed in range(seeds):
        for side, runner in enumerate((reference, loaded)):
            copies = copy.deepcopy(args)
            with torch.random.fork_rng():
                torch.manual_seed(seed)
                losses[side].append(float(runner(*copies)))
            flat = torch.cat([p.grad.flatten().double() for a in copies if isinstance(a, torch.nn.Module)
                              for p in a.parameters() if p.grad is not None] or [torch.zeros(1, dtype=torch.float64)])
            grads[side] = flat if grads[side] is None else grads[side] + flat
    want, got = torch.tensor(losses[0], dtype=torch.float64), torch.tensor(losses[1], dtype=torch.float64)
    # three standard errors of the difference of the means, each side's spread its own
    spread = 3 * float(((want.var() + got.var()) / seeds).sqrt()) + 0.01 * abs(float(want.mean()))
    cosine = float(torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0))
    if abs(float(got.mean() - want.mean())) > spread or not cosine > 0.9:
        raise StepMismatch(
            f"step {name!r}: the captured step draws random numbers (dropout), so it was compared over {seeds} "
            f"seeds: its mean loss {float(got.mean()):.6g} against {float(want.mean()):.6g} (allowed {spread:.3g}), "
            f"its mean gradient's cosine with the reference's {cosine:.3f} (at least 0.9). It is not shipped.")


def check_against_reference(name: str, fn: Callable, args: tuple, loaded: Callable, check: str,
                            changed: tuple | None = None) -> None:
    """Run the loaded step and the reference on equal copies of changed arguments: a value the
    trace baked in (a tensor read outside the arguments) shows as a difference, and so does a
    branch on a value wherever the changed values take the other branch."""
    import torch

    changed = changed_copies(args) if changed is None else changed
    reference_fn = torch.compile(fn) if check == "compile" else fn
    results = []
    for runner in (reference_fn, loaded):
        copies = copy.deepcopy(changed)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            value = runner(*copies)
        results.append((value, _state(copies)))
    (want, want_state), (got, got_state) = results
    problems = _compare(want, got, "the result") + _compare_state(want_state, got_state)
    if problems:
        raise StepMismatch(
            f"step {name!r}: the captured step computes something else than {fn.__qualname__} run "
            f"{'eagerly' if check == 'eager' else 'with torch.compile'} on changed weights and inputs: "
            + "; ".join(problems[:5]).replace("{fn}", fn.__qualname__)
            + ". The step breaks its route's contract (a tensor read outside its arguments, a branch on a "
              "value, randomness: try check=\"compile\"); it is not shipped."
        )


def changed_copies(args: tuple) -> tuple:
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


def _compare_state(want: list, got: list) -> list[str]:
    """Each tensor the step can change, named: a parameter's value and gradient, a buffer, an input."""
    if len(want) != len(got):
        return [f"the step left {len(got)} tensors in its arguments, expected {len(want)}"]
    problems = []
    for index, ((name, want_value, want_grad), (_, got_value, got_grad)) in enumerate(zip(want, got)):
        label = name or f"input tensor {index}"
        problems += _compare(want_value, got_value, f"{label} after the step")
        problems += _compare(want_grad, got_grad, f"the gradient of {label}")
    return problems


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
            worst = [line.strip() for line in str(exc).splitlines() if line.strip().startswith("Greatest absolute")]
            return [f"{where}: {str(exc).splitlines()[0]}" + (f" ({worst[0][0].lower()}{worst[0][1:]})" if worst else "")]
        return []
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)) and len(want) == len(got):
        return [p for i, (w, g) in enumerate(zip(want, got)) for p in _compare(w, g, f"{where}[{i}]")]
    if isinstance(want, dict) and isinstance(got, dict) and want.keys() == got.keys():
        return [p for k in want for p in _compare(want[k], got[k], f"{where}[{k!r}]")]
    if hasattr(want, "to_tuple") and hasattr(got, "to_tuple"):  # transformers' ModelOutput
        return _compare(want.to_tuple(), got.to_tuple(), where)
    if want is None and got is None or (isinstance(want, call_contract.VALUES) and want == got):
        return []
    return [f"{where} is {type(got).__name__} {str(got)[:80]}, expected {type(want).__name__} {str(want)[:80]}"]
