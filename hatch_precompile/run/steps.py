"""Whole steps captured ahead of time with ``torch.compiler.precompile`` (torch 2.14+): no Dynamo at
the first call, where ``torch.compile`` traces the step's Python again in every process.

At build, a workload calls ``save_step(name, fn, *args)``: the step is captured, checked against
eager on changed weights and inputs, and stored with its contract (what the capture assumed of the
arguments). At run time ``load_step(package, name, fn)`` returns a callable that runs the captured
step where the arguments keep that contract and the package's artifacts were installed for this
machine, and ``torch.compile(fn)`` everywhere else: older torch, another shape, a Python value or
a mode that differs, a load that fails. A failed shortcut costs time, never correctness.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.protocol import STEPS_DIR, check_artifact_name
from hatch_precompile.run import artifacts, loader, variables

CONTRACT_FORMAT = 1
_VALUES = (bool, int, float, str, type(None))
CHECKS = ("eager", "compile")  # what save_step() compares the captured step with


_LOADING = threading.Lock()  # precompile.load primes torch's process-wide caches: one at a time


class StepMismatch(AssertionError):
    """At build: the captured step computed something else than the reference (fails the workload)."""


def _check_name(name: str) -> None:
    check_artifact_name(name, "step")


def step_files(name: str) -> dict[str, str]:
    """The logical paths of a step's three files in an artifact set."""
    return {part: f"{STEPS_DIR}/{name}.{part}" for part in ("py", "cache", "json")}


# -- the contract: what the capture assumed of its arguments -------------------------------------


def describe(args: tuple, where: str = "argument") -> list[dict[str, Any]]:
    """Each argument as the capture sees it; equal descriptions keep the captured step valid."""
    return [_describe(arg, f"{where} {i}") for i, arg in enumerate(args)]


def _describe(arg: Any, where: str) -> dict[str, Any]:
    import torch

    if isinstance(arg, torch.nn.Module):
        tensors = [(kind, name, *_tensor(t)) for kind, named in (("p", arg.named_parameters()), ("b", arg.named_buffers()))
                   for name, t in named]
        return {
            "module": f"{type(arg).__module__}.{type(arg).__qualname__}",
            # repr shows each submodule's settings (dropout p, eps, ...), which the trace baked in
            "repr": _digest(repr(arg)),
            "settings": _digest(json.dumps([_settings(m) for m in arg.modules()], default=repr)),
            "tensors": _digest(json.dumps(tensors)),
            "training": _digest(json.dumps([m.training for m in arg.modules()])),
        }
    if isinstance(arg, torch.Tensor):
        return {"tensor": _tensor(arg)}
    if isinstance(arg, (list, tuple)):
        return {type(arg).__name__: [_describe(a, f"{where}[{i}]") for i, a in enumerate(arg)]}
    if isinstance(arg, dict) and all(isinstance(k, str) for k in arg):
        return {"dict": {k: _describe(v, f"{where}[{k!r}]") for k, v in sorted(arg.items())}}
    if isinstance(arg, _VALUES):
        return {"value": [type(arg).__name__, repr(arg)]}
    raise TypeError(f"{where} is a {type(arg).__name__}; a step's arguments are modules, tensors, "
                    "numbers, strings, None, and lists, tuples and dicts of those")


def _settings(module: Any) -> list:
    """What ``repr`` may not show of a submodule and the trace baked in: its plain attributes
    (``num_heads``, ``batch_first``), its ``config`` where it has one (transformers), its hooks."""
    plain = sorted((k, repr(v)) for k, v in vars(module).items()
                   if k != "training" and isinstance(v, _VALUES + (tuple,)) and not k.startswith("__"))
    config = getattr(module, "config", None)
    to_dict = getattr(config, "to_dict", None)
    hooks = [[getattr(h, "__qualname__", type(h).__name__) for h in getattr(module, kind, {}).values()]
             for kind in ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")]
    return [plain, to_dict() if callable(to_dict) else None, hooks]


def _tensor(t: Any) -> list:
    return [list(t.shape), list(t.stride()), str(t.dtype), str(t.device), bool(t.requires_grad)]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def modes() -> dict[str, Any]:
    """The process modes a trace bakes in."""
    import torch

    return {"grad": torch.is_grad_enabled(), "default_dtype": str(torch.get_default_dtype()),
            "autocast": {device: str(torch.get_autocast_dtype(device)) if torch.is_autocast_enabled(device) else None
                         for device in ("cpu", "cuda")}}


def mismatch(contract: dict[str, Any], args: tuple) -> str | None:
    """Why ``args`` (in this process's modes) break the captured step's contract, or None."""
    if modes() != contract["modes"]:
        return f"the process modes {modes()} differ from the capture's {contract['modes']}"
    if len(args) != len(contract["args"]):
        return f"called with {len(args)} arguments, captured with {len(contract['args'])}"
    try:
        now = describe(args)
    except TypeError as exc:
        return str(exc)
    except Exception as exc:  # a module whose repr or config raises: compile it, never raise
        return f"the arguments could not be described: {exc!r}"
    for i, (was, got) in enumerate(zip(contract["args"], now)):
        if was != got:
            return f"argument {i} differs from the capture's: {_difference(was, got)}"
    return None


def _difference(was: dict, got: dict) -> str:
    if was.keys() != got.keys():
        return f"a {_kind(got)} where the capture had a {_kind(was)}"
    if "module" in was:
        parts = {"module": "its class", "repr": "its submodules or their settings",
                 "settings": "its submodules' attributes, config or hooks",
                 "tensors": "its parameters or buffers (names, shapes, layouts, dtypes, devices, requires_grad)",
                 "training": "a train()/eval() mode"}
        return ", ".join(text for key, text in parts.items() if was.get(key) != got.get(key))
    return f"{json.dumps(got)[:200]} instead of {json.dumps(was)[:200]}"


def _kind(described: dict) -> str:
    return next(iter(described))


# -- build side ------------------------------------------------------------------------------------


def save_step(name: str, fn: Callable[..., Any], *args: Any, check: str = "eager") -> Path | None:
    """Capture ``fn(*args)`` as the package's step ``name`` when called from a build workload.

    ``fn`` is the whole step (``fn(model, x, y)`` that returns the loss after ``backward()``, or
    a forward under ``no_grad``); call it with the arguments users will pass. The capture runs
    on copies, so the workload's model and tensors are left as they were. Before it is stored,
    the captured step is run on changed weights and inputs and compared with ``fn`` run eagerly
    (``check="compile"``: with ``torch.compile(fn)``, for steps whose randomness differs between
    eager and compiled code); a difference raises StepMismatch, which fails the build.

    Outside a precompile build, or with a torch older than 2.14 (no ``torch.compiler.precompile``),
    this does nothing and returns None: ``load_step`` then falls back to ``torch.compile``.
    """
    _check_name(name)
    if check not in CHECKS:
        raise ValueError(f"save_step({name!r}, ...): check={check!r} must be one of {', '.join(CHECKS)}")
    directory = variables.steps_dir()
    if not directory:
        return None
    if (Path(directory) / Path(step_files(name)["json"]).name).exists():
        raise ValueError(f"save_step({name!r}, ...): a step named {name!r} was already saved by this build")
    import torch

    precompile = getattr(torch.compiler, "precompile", None)
    if precompile is None:
        print(f"precompile: warning: step {name!r} not captured: torch {torch.__version__} has no "
              "torch.compiler.precompile (2.14+); load_step() falls back to torch.compile", flush=True)
        return None
    contract = {"format": CONTRACT_FORMAT, "torch": torch.__version__, "modes": modes(),
                "args": describe(args), "check": check}
    code, cache = precompile(fn, *copy.deepcopy(args))
    _check_against_reference(name, fn, args, precompile.load(code, cache), check)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    files = step_files(name)
    (out / Path(files["py"]).name).write_text(code)
    (out / Path(files["cache"]).name).write_bytes(cache)
    (out / Path(files["json"]).name).write_text(json.dumps(contract, indent=1))
    return out / Path(files["py"]).name


def _check_against_reference(name: str, fn: Callable, args: tuple, loaded: Callable, check: str) -> None:
    """Run the loaded step and the reference on equal copies of changed arguments: a value the
    trace baked in (a tensor read outside the arguments) shows as a difference, and so does a
    branch on a value wherever the changed values take the other branch."""
    import torch

    changed = _changed(args)
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
            + ". The step breaks torch.compiler.precompile's contract (a tensor read outside its "
              "arguments, a branch on a value, randomness: try check=\"compile\"); it is not shipped."
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
    if want is None and got is None or (isinstance(want, _VALUES) and want == got):
        return []
    return [f"{where} is {type(got).__name__} {str(got)[:80]}, expected {type(want).__name__} {str(want)[:80]}"]


# -- run side --------------------------------------------------------------------------------------


class Step:
    """``fn`` as shipped: the captured step where its contract holds, ``fallback`` elsewhere.

    ``route`` says what the last call ran: "precompiled", "fallback", or None before a call;
    ``reason`` why the fallback ran (None when it did not).
    """

    def __init__(self, package: str, name: str, fn: Callable[..., Any], fallback: Callable[..., Any] | None):
        self.package, self.name, self.fn = package, name, fn
        self._fallback = fallback
        self._lock = threading.Lock()
        self._resolved = False
        self._contract: dict[str, Any] | None = None
        self._files: tuple[str, bytes] | None = None
        self._loaded: Callable[..., Any] | None = None
        self._unavailable: str | None = None  # why the captured step cannot run in this process
        self.route: str | None = None
        self.reason: str | None = None

    def __repr__(self) -> str:
        return f"<hatch_precompile step {self.package}:{self.name} route={self.route}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:  # the capture's calling convention is positional
            self._ran("fallback", f"called with keyword arguments ({', '.join(kwargs)})")
            return self.fallback(*args, **kwargs)
        loaded, why = self._precompiled_for(args)
        if loaded is not None:
            import torch

            try:
                result = loaded(*args)
            except torch.compiler.precompile.PrecompileError as exc:  # torch's own checks, before any work
                why = f"torch.compiler.precompile refused the arguments: {exc}"
            else:
                self._ran("precompiled", None)
                return result
        self._ran("fallback", why)
        return self.fallback(*args)

    def _ran(self, route: str, reason: str | None) -> None:
        with self._lock:
            self.route, self.reason = route, reason

    @property
    def fallback(self) -> Callable[..., Any]:
        with self._lock:
            if self._fallback is None:
                import torch

                self._fallback = torch.compile(self.fn)
            return self._fallback

    def _precompiled_for(self, args: tuple) -> tuple[Callable | None, str | None]:
        with self._lock:
            if not self._resolved:
                self._resolved = True
                self._contract = self._read_contract()
            if self._contract is None:
                return None, self._unavailable
            why = mismatch(self._contract, args)
            if why is not None:
                return None, why
            if self._loaded is None and self._files is not None:
                with _LOADING:
                    self._loaded = self._load()
            return self._loaded, self._unavailable

    def _read_contract(self) -> dict[str, Any] | None:
        """The step's contract where the step can run here (its files read and checked), or None
        with ``reason`` set."""
        try:
            result = loader.load(self.package)  # the set it installed is for this torch and CPU
            if not result:
                return self._skip(f"the package's artifacts are not in use: {result.reason}", quiet=True)
            import torch

            if getattr(torch.compiler, "precompile", None) is None:
                return self._skip(f"torch {torch.__version__} has no torch.compiler.precompile", quiet=True)
            found = artifacts.find(self.package)
            files = step_files(self.name)
            if found is None or files["json"] not in found.manifest.files:
                return self._skip(f"no step named {self.name!r} was shipped for this environment")
            contract = json.loads(found.read(files["json"]))
            if not isinstance(contract, dict) or contract.get("format") != CONTRACT_FORMAT:
                return self._skip(f"step {self.name!r} has a contract this hatch-precompile cannot read")
            self._files = (found.read(files["py"]).decode(), found.read(files["cache"]))
            return contract
        except artifacts.Skip as skip:
            return self._skip(f"step {self.name!r}: {skip}")
        except Exception as exc:
            return self._skip(f"step {self.name!r}: {exc!r}")

    def _load(self) -> Callable[..., Any] | None:
        import torch

        code, cache = self._files
        self._files = None
        quiet = _WithoutExecWarning()
        logging.getLogger("torch._precompile").addFilter(quiet)
        try:
            return torch.compiler.precompile.load(code, cache)
        except Exception as exc:
            self._contract = None
            self._skip(f"step {self.name!r} did not load: {exc!r}")
            return None
        finally:
            logging.getLogger("torch._precompile").removeFilter(quiet)

    def _skip(self, reason: str, quiet: bool = False) -> None:
        self._unavailable = reason
        if not quiet:
            try:
                loader.report_skip(loader.LoadResult(self.package, False, f"{reason}; compiling it instead"))
            except Exception:  # warnings turned into errors (-W error): the step still falls back
                pass
        return None


class _WithoutExecWarning(logging.Filter):
    """torch warns at every load that the code it runs is untrusted; this code is the package's own,
    checked against the sha256 its wheel's manifest lists, so the warning would only be noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("torch.compiler.precompile.load is about to EXEC")


def load_step(package: str, name: str, fn: Callable[..., Any], fallback: Callable[..., Any] | None = None) -> Step:
    """``fn`` as ``package`` shipped it under ``name`` (see Step); never raises for an artifact problem.

    Cheap at import: nothing is read before the first call. ``fallback`` (default
    ``torch.compile(fn)``, made on first need) runs wherever the captured step cannot.
    """
    _check_name(name)
    if not callable(fn):
        raise TypeError(f"load_step({package!r}, {name!r}, fn): fn must be callable, got {type(fn).__name__}")
    return Step(package, name, fn, fallback)
