"""The exported route at build: ``torch.export`` a step, compile it with AOTInductor, prove it.

``fn(model, x, ...)`` becomes a module whose submodules are ``fn``'s module arguments (``arg0``,
...) and whose inputs are the rest; ``torch.export`` traces it (non-strict) with the author's
``dynamic_shapes``, while build/reads.py records the plain values its Python read of the modules
and their configs. AOTInductor compiles it into a package that holds no tensor of the modules:
not as data (``package_constants_in_so = False``), and not in the code either
(``always_keep_tensor_constants``: Inductor otherwise folds every 0-dim tensor and 1-D tensor of
up to 8 elements, a 2-to-8-class head's bias, a small LayerNorm's, into the generated code). Every
module tensor the program reads must be a constant the caller binds at run time; the build fails
naming any that is not. What a checkpoint does not hold (buffers that are not persistent,
constants the trace lifted) is saved beside it. The compile uses a private Inductor cache dir, so
nothing of it is shipped twice, and its compiler commands go through the build's portable-kernel
rewrite (build/isa.py): the CPU features its kernels may use are recorded with it.

Before the build's process opens the package, a fresh process opens and runs it
(child/package_proof.py): torch's loader can crash the process that opens a package (a segfault
on some CUDA machines), and a package that takes its prover down is not shipped -- the step runs
its warm fallback, and the build goes on. The proof (torch, device, CUDA) is stored with the step;
load_step opens a package only where one holds. Then the package is loaded exactly as users load
it (run/exported.py) and run on changed weights and inputs, and where dims may vary, on other
sizes too, against ``fn``. When the
package being built already ships the step from another torch (``bake`` under another
interpreter), that package is tried here first: if it loads and matches, it is shipped again for
this torch with the proof, and nothing is compiled.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.build import reads, step_check, torch_export
from hatch_precompile.child import package_proof
from hatch_precompile.protocol import CACHE_DIR_VAR, step_files
from hatch_precompile.protocol.steps import CONTRACT_FORMAT, EXPORTED
from hatch_precompile.run import contract, exported, variables
from hatch_precompile.run.torch_internals import aoti, patching, settings

_flags: list[tuple[str, ...]] = []  # arch flags of the compiles while one is recorded
_recording = [False]


def save(name: str, fn: Callable, args: tuple, shapes: Any, check: str, out: Path, training: bool = False) -> Path:
    """Export, compile, check and store step ``name`` (``shapes``: from input_shapes); ``training``:
    ``fn`` returns a scalar loss, and the package computes it and every gradient (the joint
    forward and backward graph). Raises NotAvailable, StepMismatch, or torch's error (which
    save_step turns into a StepCaptureError)."""
    import torch

    problem = available(torch, training)
    if problem:
        raise step_check.NotAvailable(problem)
    reused = _reuse_shipped(name, fn, args, check, out)
    if reused is not None:
        return reused
    positions = [i for i, a in enumerate(args) if isinstance(a, torch.nn.Module)]
    inputs = tuple(a for i, a in enumerate(args) if i not in positions)
    wrapper = _Wrapper(fn, args, positions, training)
    with reads.recording({i: args[i] for i in positions}) as read:
        program = torch.export.export(wrapper, inputs, dynamic_shapes=None if shapes is None else {"inputs": shapes},
                                      strict=False)
    if training:
        program = torch_export.joint_program(torch, program)
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-export-") as tmp:
        package_path = os.path.join(tmp, "step.pt2")
        flags = _compile(torch, program, package_path, tmp)
        package = Path(package_path).read_bytes()
    candidates = {**module_tensors(args, positions), **_lifted(torch, program)}
    proof = proven_in_child(name, package, candidates, flat_tensors(torch, inputs))
    spec, shipped = _spec(torch, name, program, args, positions, inputs, proof, flags, read)
    if training:
        spec["training"] = _training_outputs(name, program)
    step = exported.ExportedStep(name, spec, package, shipped)
    _prove(name, fn, args, check, step, spec)
    record = {"format": CONTRACT_FORMAT, "route": EXPORTED, "torch": spec["torch"], "export": spec,
              "proofs": [proof.environment]}
    return _store_proven(name, out, record, package, shipped, proven=[])


def proven_in_child(name: str, package: bytes, constants: dict[str, Any], inputs: list[Any]) -> package_proof.Proof:
    """The package opened and run in a process of its own (child/package_proof.py) before this one
    opens it: NotAvailable where the loader crashed or hung there (the step is not shipped, the
    build goes on), torch's error where it refused."""
    try:
        return package_proof.prove(package, constants, inputs, variables.proof_timeout())
    except package_proof.LoaderCrashed as exc:
        raise step_check.NotAvailable(str(exc)) from None
    except package_proof.LoaderRefused as exc:
        raise exported.Refused(f"the AOTInductor loader refused the package: {exc}") from None


def module_tensors(args: tuple, positions: list[int]) -> dict[str, Any]:
    """Every tensor of the step's modules by the name the package gives it (``arg<i>.<name>``)."""
    found = {}
    for i in positions:
        for key, tensor in [*args[i].named_parameters(remove_duplicate=False),
                            *args[i].named_buffers(remove_duplicate=False)]:
            found[f"arg{i}.{key}"] = tensor
    return found


def _lifted(torch: Any, program: Any) -> dict[str, Any]:
    """The tensors the export lifted out of the modules (constants, and its state dict)."""
    return {k: v for k, v in {**program.state_dict, **program.constants}.items() if isinstance(v, torch.Tensor)}


def flat_tensors(torch: Any, inputs: tuple) -> list[Any]:
    """The flat tensors a package takes for ``inputs`` (its other leaves were fixed at export)."""
    leaves, _ = aoti.pytree(torch).tree_flatten((inputs, {}))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def available(torch: Any, training: bool = False) -> str | None:
    """Why this torch cannot export a step for the route (a training step: with its backward), or None."""
    problem = exported.loader_problem(torch)
    if problem:
        return problem
    try:
        from torch._inductor import aoti_compile_and_package, config  # noqa: F401
    except ImportError:
        return f"torch {torch.__version__} has no torch._inductor.aoti_compile_and_package"
    if not hasattr(config.aot_inductor, "package_constants_in_so"):
        return f"torch {torch.__version__}'s AOTInductor cannot leave the weights out of a package"
    if not aoti.keeps_tensor_constants(torch):
        return (f"torch {torch.__version__}'s Inductor cannot keep small tensors out of the code it generates (no "
                "always_keep_tensor_constants or joint_graph_constant_folding): a caller's other weights would not be "
                "seen")
    if training and not torch_export.has_joint_export(torch):
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


def _compile(torch: Any, program: Any, package_path: str, tmp: str) -> list[tuple[str, ...]]:
    """AOTInductor's package of ``program`` at ``package_path``, compiled in a private cache dir;
    the arch flags its compiles used."""
    patching.wrap("compile-command", before=_record_flags)
    _flags.clear()
    _recording[0] = True
    try:
        with _cache_dir(os.path.join(tmp, "inductor-cache")):
            torch_export.aoti_compile(torch, program, package_path, {"aot_inductor.package_constants_in_so": False,
                                                                       **aoti.KEEP_CONSTANTS})
    finally:
        _recording[0] = False
    return list(dict.fromkeys(_flags))


def _record_flags(arguments: dict[str, Any]) -> None:
    from hatch_precompile.build import isa

    if _recording[0] and isinstance(arguments.get("cmd_line"), str):  # after the portable rewrite
        _flags.append(isa.arch_flags(arguments["cmd_line"]))


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


def _spec(torch: Any, name: str, program: Any, args: tuple, positions: list[int], inputs: tuple,
          proof: package_proof.Proof, flags: list[tuple[str, ...]],
          read: dict[int, list]) -> tuple[dict[str, Any], bytes | None]:
    """The export's contract (run/exported.py reads it) and the constants shipped beside it."""
    pytree = aoti.pytree(torch)
    leaves, in_spec = pytree.tree_flatten((inputs, {}))
    placeholders = _user_input_values(program)
    ranges: dict[str, list] = {}
    for symbol, bounds in program.range_constraints.items():
        ranges[str(symbol)] = [_bound(bounds.lower), _bound(bounds.upper)]
    described: list[dict[str, Any]] = []
    tensors = iter(placeholders)
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            described.append({"value": [type(leaf).__name__, repr(leaf)]})
            continue
        value = next(tensors)
        described.append({
            "dims": [_dim(name, i, d) for d in value.shape], "dtype": str(leaf.dtype), "device": str(leaf.device),
            "stride": None if leaf.is_contiguous() else list(leaf.stride()),
        })
    fqns = list(proof.fqns)  # as the proving process's loader listed them: none is opened here yet
    modules: dict[str, dict[str, Any]] = {}
    named: dict[int, dict[str, Any]] = {}
    persistent: dict[int, set[str]] = {}  # what a checkpoint holds
    for i in positions:
        module = args[i]
        named[i] = {**dict(module.named_parameters(remove_duplicate=False)),
                    **dict(module.named_buffers(remove_duplicate=False))}
        persistent[i] = set(module.state_dict(keep_vars=True))
        modules[str(i)] = {"class": f"{type(module).__module__}.{type(module).__qualname__}",
                           "structure": contract.structure(module), "reads": read.get(i, []),
                           "hooks": contract.hooks(module), "tied": _tied(named[i]), "tensors": {},
                           "train_modes": contract.train_modes(module),
                           "requires_grad": contract.requiring_grad(module)}
    _check_covered(name, program, fqns, modules)
    constants: dict[str, list[Any]] = {}
    shipped: dict[str, Any] = {}
    for fqn in fqns:
        position, _, rest = fqn.partition(".")
        index = int(position[3:]) if position.startswith("arg") and position[3:].isdigit() else None
        if index in named and rest in named[index]:
            t = named[index][rest]
            held = rest in persistent[index]
            modules[str(index)]["tensors"][rest] = [list(t.shape), list(t.stride()), str(t.dtype), str(t.device), held]
            constants[fqn] = ["arg", index, rest]
            if not held:  # not in a checkpoint: the package carries it
                shipped[fqn] = t.detach().clone()
            continue
        value = program.constants.get(fqn, program.state_dict.get(fqn))
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"the exported program's constant {fqn!r} is neither a tensor of the step's modules "
                             "nor one the trace lifted")
        constants[fqn] = ["shipped"]
        shipped[fqn] = value.detach().clone()
    spec = {
        "arity": len(args), "modes": contract.modes(), "modules": modules, "leaves": described,
        "ranges": ranges, "constants": constants, "call_spec": list(proof.call_spec),
        # "libraries" (what its model library needs of the system) is added by the build's parent
        # (build/capture.py): it reads ELF with pyelftools, which the target environment may lack.
        "cpu_features": _features(flags), "libraries": {}, "torch": torch.__version__,
    }
    blob = None
    if shipped:
        buffer = io.BytesIO()
        torch.save(shipped, buffer)
        blob = buffer.getvalue()
    return spec, blob


def _training_outputs(name: str, program: Any) -> dict[str, Any]:
    """What a training package returns, in order: the loss, then a gradient per parameter that
    requires one (``grads``: [argument position, parameter name]); the buffers it updates (batch
    norm's statistics) it writes in place, into the caller's tensors it was bound to."""
    grads: list[list[Any]] = []
    kinds: list[str] = []
    loss = None
    for spec in program.graph_signature.output_specs:
        kind = spec.kind.name
        if kind == "BUFFER_MUTATION":
            continue
        if kind == "LOSS_OUTPUT":
            loss = len(kinds)
        elif kind == "GRADIENT_TO_PARAMETER":
            position, _, rest = spec.target.partition(".")
            grads.append([len(kinds), int(position[3:]), rest])
        else:
            raise ValueError(f"step {name!r}: the joint program returns a {kind} output; a training step returns its "
                             "loss alone")
        kinds.append(kind)
    if loss is None:
        raise ValueError(f"step {name!r}: the joint program returns no loss")
    mutated = [spec.target for spec in program.graph_signature.output_specs if spec.kind.name == "BUFFER_MUTATION"]
    random = any(any(word in str(node.target) for word in RANDOM_OPS)
                 for node in program.graph.nodes if node.op == "call_function")
    return {"loss": loss, "grads": grads, "outputs": len(kinds), "mutated": mutated, "random": random}


RANDOM_OPS = ("rand", "bernoulli", "dropout", "normal", "multinomial", "philox")  # ops that draw numbers


def _tied(named: dict[str, Any]) -> list[list[str]]:
    """The names that share one tensor (tied weights), each group sorted."""
    groups: dict[int, list[str]] = {}
    for key, t in named.items():
        groups.setdefault(id(t), []).append(key)
    return sorted(sorted(group) for group in groups.values() if len(group) > 1)


def _check_covered(name: str, program: Any, fqns: list[str], modules: dict[str, dict[str, Any]]) -> None:
    """Every module tensor the program reads (a lifted input with users) is one of the package's
    constants, itself or through a tied alias: else the compile folded it into the code, and a
    caller's other value would not be seen. Raises naming each one that is not."""
    signature = program.graph_signature
    lifted = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    read = [lifted[node.name] for node in program.graph.nodes
            if node.op == "placeholder" and node.name in lifted and node.users]
    have = set(fqns)
    folded = []
    for fqn in read:
        position, _, rest = fqn.partition(".")
        owner = modules.get(position[3:]) if position.startswith("arg") else None
        aliases = next((group for group in (owner or {}).get("tied", []) if rest in group), [rest])
        if not any(f"{position}.{alias}" in have for alias in aliases):
            folded.append(f"argument {position[3:]}'s {rest}" if owner is not None else fqn)
    if folded:
        raise ValueError(f"step {name!r}: the AOTInductor package holds these module tensors in its code, not as "
                         f"constants the caller binds: {', '.join(sorted(folded))}. A caller's other values would "
                         "not be seen, so it is not shipped")


def _user_input_values(program: Any) -> list[Any]:
    """The example values (fake tensors) of the program's tensor user inputs, in order."""
    names = set(program.graph_signature.user_inputs)
    values = []
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in names and hasattr(node.meta.get("val"), "shape"):
            values.append(node.meta["val"])
    return values


def _dim(name: str, leaf: int, size: Any) -> int | str:
    if isinstance(size, int):
        return size
    expr = size.node.expr
    if getattr(expr, "is_Symbol", False):
        return str(expr)
    if getattr(expr, "is_Integer", False):
        return int(expr)
    raise ValueError(f"input {leaf} has a dim derived from others ({expr}); hatch-precompile checks dims that "
                     "vary on their own (torch.export.Dim) or fixed ones")


def _bound(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None  # int_oo: no upper bound
    return number if abs(number) < 2**62 else None


def _features(flags: list[tuple[str, ...]]) -> list[str]:
    """The CPU features the package's kernels may use (every feature of this CPU when its compiles
    could not be read)."""
    from hatch_precompile.build import isa

    try:
        compiler = settings.cpp_compiler()
        return isa.features(compiler, set(flags) if flags else {("-march=native",)})
    except Exception:
        return ["?unknown"]  # no CPU has it: load_step refuses the package rather than trust it


def _prove(name: str, fn: Callable, args: tuple, check: str, step: exported.ExportedStep, spec: dict[str, Any]) -> None:
    """The package, run as users run it, against ``fn``: on changed values, then on other sizes."""
    import torch

    def run(*call: Any) -> Any:
        try:
            return step.call(call)
        except exported.Refused as exc:
            raise step_check.StepMismatch(f"step {name!r}: the exported step refused its own example: {exc}") from None

    changed = step_check.changed_copies(args)  # every weight other than the build's: all are the caller's
    reference = fn
    if "training" in spec:  # what the step leaves users: the loss, and the gradients in .grad
        reference = step_check.with_backward(torch.compile(fn) if check == "compile" else fn)
        check = "eager"
        if spec["training"]["random"]:  # dropout draws other numbers than eager's: compared statistically
            step_check.check_statistically(name, reference, run, changed)
            return
    step_check.check_against_reference(name, reference, args, run, check, changed=changed)
    resized = _resized(torch, changed, spec)
    if resized is not None:
        step_check.check_against_reference(name, reference, args, run, check, changed=resized)


def _resized(torch: Any, args: tuple, spec: dict[str, Any]) -> tuple | None:
    """Copies of ``args`` with every dim that may vary at another size in its range (sliced, or
    grown by repeating its first entries), or None where no dim varies."""
    sizes: dict[str, tuple[int, int]] = {}
    pytree = aoti.pytree(torch)
    positions = {int(k) for k in spec["modules"]}
    inputs = tuple(a for i, a in enumerate(args) if i not in positions)
    leaves, tree = pytree.tree_flatten((inputs, {}))
    for leaf, want in zip(leaves, spec["leaves"]):
        for size, dim in zip(getattr(leaf, "shape", ()), want.get("dims", ())):
            if isinstance(dim, str) and dim not in sizes:
                low, high = spec["ranges"][dim]
                other = size - 1 if size - 1 >= max(low, 1) else size + 1
                if high is not None and other > high or other < low:
                    continue
                sizes[dim] = (size, other)
    if not sizes:
        return None
    changed = []
    for leaf, want in zip(leaves, spec["leaves"]):
        if isinstance(leaf, torch.Tensor):
            for axis, dim in enumerate(want["dims"]):
                if isinstance(dim, str) and dim in sizes:
                    size, other = sizes[dim]
                    leaf = leaf.narrow(axis, 0, other) if other < size else torch.cat(
                        [leaf, leaf.narrow(axis, 0, other - size)], axis)
            leaf = leaf.contiguous()
        changed.append(leaf)
    new_inputs = iter(pytree.tree_unflatten(changed, tree)[0])
    return tuple(copy.deepcopy(a) if i in positions else next(new_inputs) for i, a in enumerate(args))


def _reuse_shipped(name: str, fn: Callable, args: tuple, check: str, out: Path) -> Path | None:
    """The package built for this step on another torch, when the package being built ships one that
    loads and matches here (stored with the proof), else None."""
    import torch

    for found, record in shipped_exports(variables.package() or "", name):
        if record.get("torch") == torch.__version__:
            continue
        files = step_files(name)
        try:
            package = found.read(files["pt2"])
            shipped = found.read(files["constants"]) if files["constants"] in found.manifest.files else None
            positions = [int(k) for k in record["export"]["modules"]]
            candidates = module_tensors(args, positions)
            if shipped is not None:
                candidates.update(torch.load(io.BytesIO(shipped), weights_only=True, map_location="cpu"))
            inputs = tuple(a for i, a in enumerate(args) if i not in positions)
            proof = proven_in_child(name, package, candidates, flat_tensors(torch, inputs))
            step = exported.ExportedStep(name, record["export"], package, shipped)
            _prove(name, fn, args, check, step, record["export"])
        except Exception as exc:  # Refused, StepMismatch, a crashed loader, anything else: export it again
            step_check.note(f"step {name!r} built on torch {record.get('torch')} does not serve torch "
                              f"{torch.__version__} ({exc}); exporting it again for this torch")
            continue
        print(f"precompile: step {name!r}: the package built on torch {record.get('torch')} loads and matches "
              f"on torch {torch.__version__}: shipped for it as it is, not compiled again", flush=True)
        proven = sorted({*record.get("proven", []), torch.__version__} - {record.get("torch")})
        record = {**record, "proofs": [*record.get("proofs", []), proof.environment]}
        return _store_proven(name, out, record, package, shipped, proven)
    return None


def _store_proven(name: str, out: Path, record: dict[str, Any], package: bytes, shipped: bytes | None,
                  proven: list[str]) -> Path:
    files = step_files(name)
    out.mkdir(parents=True, exist_ok=True)
    (out / Path(files["pt2"]).name).write_bytes(package)
    if shipped is not None:
        (out / Path(files["constants"]).name).write_bytes(shipped)
    (out / Path(files["json"]).name).write_text(json.dumps({**record, "proven": proven}, indent=1))
    return out / Path(files["pt2"]).name


def shipped_exports(package: str, name: str) -> list[tuple[Any, dict[str, Any]]]:
    """(artifact set, contract) of each exported step ``name`` that ``package`` already ships."""
    from hatch_precompile.run import artifacts

    found = []
    for artifact_set in artifacts.all_sets(package):
        path = step_files(name)["json"]
        if path not in artifact_set.manifest.files:
            continue
        try:
            record = json.loads(artifact_set.read(path))
        except (artifacts.Skip, ValueError):
            continue
        if (isinstance(record, dict) and record.get("format") == CONTRACT_FORMAT and record.get("route") == EXPORTED
                and isinstance(record.get("export"), dict)):
            found.append((artifact_set, record))  # an older format's package is exported again, not reused
    return found
