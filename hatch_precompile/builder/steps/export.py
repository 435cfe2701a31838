"""The exported route at build: ``torch.export`` a step, compile it with AOTInductor, prove it.

``fn(model, x, ...)`` becomes a module whose submodules are ``fn``'s module arguments (``arg0``,
...) and whose inputs are the rest; ``torch.export`` traces it (non-strict) with the author's
``dynamic_shapes``, while builder/steps/trace_reads.py records the plain values its Python read of the modules
and their configs. AOTInductor compiles it into a package that holds no tensor of the modules:
not as data (``package_constants_in_so = False``), and not in the code either
(``always_keep_tensor_constants``: Inductor otherwise folds every 0-dim tensor and 1-D tensor of
up to 8 elements, a 2-to-8-class head's bias, a small LayerNorm's, into the generated code). Every
module tensor the program reads must be a constant the caller binds at run time; the build fails
naming any that is not. What a checkpoint does not hold (buffers that are not persistent,
constants the trace lifted) is saved beside it. The compile uses a private Inductor cache dir, so
nothing of it is shipped twice, and its compiler commands go through the build's portable-kernel
rewrite (builder/sets/isa.py): the CPU features its kernels may use are recorded with it.

The package is proven (builder/steps/export_proof.py) and its contract made (builder/steps/export_contract.py)
before it is stored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.builder.steps import export_contract, export_proof, torch_export, trace_reads
from hatch_precompile.errors import NotAvailable
from hatch_precompile.protocol import CACHE_DIR_VAR
from hatch_precompile.protocol.step_file import CONTRACT_FORMAT, EXPORTED
from hatch_precompile.run.steps import exported_step
from hatch_precompile.run.torch_internals import patching
from hatch_precompile.run.torch_internals.steps import aoti


@dataclasses.dataclass
class _CompileFlags:
    """The arch flags of the kernel compiles while one package compiles. One per process: the
    hook that records them stays installed in torch once wrapped, and must find them here."""

    recording: bool = False
    flags: list[tuple[str, ...]] = dataclasses.field(default_factory=list)


_compiles = _CompileFlags()


def save(name: str, fn: Callable, args: tuple, shapes: Any, check: str, out: Path, training: bool = False) -> Path:
    """Export, compile, check and store step ``name`` (``shapes``: from input_shapes); ``training``:
    ``fn`` returns a scalar loss, and the package computes it and every gradient (the joint
    forward and backward graph). Raises NotAvailable, StepMismatch, or torch's error (which
    save_step turns into a StepCaptureError)."""
    import torch

    problem = available(torch, training)
    if problem:
        raise NotAvailable(problem)
    reused = export_proof.reuse_shipped(name, fn, args, check, out)
    if reused is not None:
        return reused
    positions = [i for i, a in enumerate(args) if isinstance(a, torch.nn.Module)]
    inputs = tuple(a for i, a in enumerate(args) if i not in positions)
    wrapper = _Wrapper(fn, args, positions, training)
    with torch_export.without_torchs_own_deprecations():
        with trace_reads.recording({i: args[i] for i in positions}) as read:
            program = torch.export.export(wrapper, inputs, strict=False,
                                          dynamic_shapes=None if shapes is None else {"inputs": shapes})
        if training:
            program = torch_export.joint_program(torch, program)
        with tempfile.TemporaryDirectory(prefix="hatch-precompile-export-") as tmp:
            package_path = os.path.join(tmp, "step.pt2")
            flags = _compile(program, package_path, tmp)
            package = Path(package_path).read_bytes()
    candidates = {**export_contract.module_tensors(args, positions), **_lifted(torch, program)}
    proof = export_proof.proven_in_child(name, package, candidates, export_contract.flat_tensors(torch, inputs))
    spec, shipped = export_contract.contract_and_constants(torch, name, program, args, positions, inputs, proof,
                                                          flags, read)
    if training:
        spec["training"] = export_contract.training_outputs(name, program)
    step = exported_step.ExportedStep(name, spec, package, shipped)
    export_proof.against_fn(name, fn, args, check, step, spec)
    record = {"format": CONTRACT_FORMAT, "route": EXPORTED, "torch": spec["torch"], "export": spec,
              "proofs": [proof.environment]}
    return export_proof.store(name, out, record, package, shipped, proven=[])


def _lifted(torch: Any, program: Any) -> dict[str, Any]:
    """The tensors the export lifted out of the modules (constants, and its state dict)."""
    return {k: v for k, v in {**program.state_dict, **program.constants}.items() if isinstance(v, torch.Tensor)}


def available(torch: Any, training: bool = False) -> str | None:
    """Why this torch cannot export a step for the route (a training step: with its backward), or None."""
    problem = exported_step.loader_problem(torch)
    if problem:
        return problem
    try:
        from torch._inductor import aoti_compile_and_package, config  # noqa: F401
    except ImportError:
        return f"torch {torch.__version__} has no torch._inductor.aoti_compile_and_package"
    if not hasattr(config.aot_inductor, "package_constants_in_so"):
        return f"torch {torch.__version__}'s AOTInductor cannot leave the weights out of a package"
    if not aoti.keeps_tensor_constants():
        return (f"torch {torch.__version__}'s Inductor cannot keep small tensors out of the code it generates (no "
                "always_keep_tensor_constants or joint_graph_constant_folding): a caller's other weights would not be "
                "seen")
    if training and not torch_export.has_joint_export():
        return (f"torch {torch.__version__} cannot export a step's backward "
                "(no torch.export.experimental._export_forward_backward)")
    return None


class _Wrapper:
    """Built lazily as a torch module: ``forward(*inputs)`` is ``fn`` with its modules put back."""

    def __new__(cls, fn: Callable, args: tuple, positions: list[int], training: bool = False) -> Any:
        import torch

        class Step(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                for i in positions:
                    self.add_module(f"arg{i}", args[i])

            def forward(self, *inputs: Any) -> Any:
                rest = iter(inputs)
                result = fn(*[getattr(self, f"arg{i}") if i in positions else next(rest) for i in range(len(args))])
                return (result,) if training else result  # the joint graph's loss is output 0

        return Step()


def input_shapes(name: str, fn: Callable, args: tuple, dynamic_shapes: Any) -> Any:
    """torch.export's ``dynamic_shapes`` for the inputs, from the author's (one entry per argument
    of ``fn``, or a dict by its parameter names); None for modules. ValueError naming the mistake."""
    import torch

    positions = [i for i, a in enumerate(args) if isinstance(a, torch.nn.Module)]
    if dynamic_shapes is None:
        return None
    if isinstance(dynamic_shapes, dict):
        try:
            names = list(inspect.signature(fn).parameters)[:len(args)]
        except (TypeError, ValueError):
            raise ValueError(f"save_step({name!r}, ...): dynamic_shapes by name needs fn's signature; give a "
                             "tuple, one entry per argument") from None
        unknown = sorted(set(dynamic_shapes) - set(names))
        if unknown:
            raise ValueError(f"save_step({name!r}, ...): dynamic_shapes names {', '.join(unknown)}, which are not "
                             f"arguments of {fn.__qualname__} ({', '.join(names)})")
        dynamic_shapes = [dynamic_shapes.get(n) for n in names]
    if not isinstance(dynamic_shapes, (list, tuple)) or len(dynamic_shapes) != len(args):
        raise ValueError(f"save_step({name!r}, ...): dynamic_shapes must have one entry per argument of "
                         f"{fn.__qualname__} ({len(args)}), or be a dict by argument name")
    for i in positions:
        if dynamic_shapes[i] is not None:
            raise ValueError(f"save_step({name!r}, ...): dynamic_shapes[{i}] must be None: argument {i} is a module")
    return tuple(s for i, s in enumerate(dynamic_shapes) if i not in positions)


def _compile(program: Any, package_path: str, tmp: str) -> list[tuple[str, ...]]:
    """AOTInductor's package of ``program`` at ``package_path``, compiled in a private cache dir;
    the arch flags its compiles used."""
    patching.wrap("compile-command", before=_record_flags)
    _compiles.flags.clear()
    _compiles.recording = True
    try:
        with _cache_dir(os.path.join(tmp, "inductor-cache")):
            torch_export.aoti_compile(program, package_path, {"aot_inductor.package_constants_in_so": False,
                                                              **aoti.KEEP_CONSTANTS})
    finally:
        _compiles.recording = False
    return list(dict.fromkeys(_compiles.flags))


def _record_flags(arguments: dict[str, Any]) -> None:
    from hatch_precompile.builder.sets import isa

    if _compiles.recording and isinstance(arguments.get("cmd_line"), str):  # after the portable rewrite
        _compiles.flags.append(isa.arch_flags(arguments["cmd_line"]))


@contextlib.contextmanager


def _cache_dir(path: str) -> Any:
    before = os.environ.get(CACHE_DIR_VAR)
    os.environ[CACHE_DIR_VAR] = path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CACHE_DIR_VAR, None)
        else:
            os.environ[CACHE_DIR_VAR] = before
