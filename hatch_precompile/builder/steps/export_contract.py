"""An exported step's contract, made at build from its program: what ``run/steps/exported_step.py`` checks at
every call and ``run/steps/call_contract.py`` at load.

The tensors of the step's modules by the names the package gives them (``arg<i>.<name>``), the
inputs flattened as the package takes them, each input leaf's dims, dtype and device, the ranges
its dims may take, every module's structure, reads, hooks and tied tensors, which constant the
caller binds and which the package ships, and for a loss step, what its outputs are (the loss,
then a gradient per parameter). Every module tensor the program reads must be a constant the
caller binds: ``contract_and_constants`` raises naming any the compile folded into the code.
"""

from __future__ import annotations

import io
from typing import Any

from hatch_precompile.child import package_proof
from hatch_precompile.run.steps import call_contract
from hatch_precompile.run.torch_internals import settings
from hatch_precompile.run.torch_internals.steps import aoti


def module_tensors(args: tuple, positions: list[int]) -> dict[str, Any]:
    """Every tensor of the step's modules by the name the package gives it (``arg<i>.<name>``)."""
    found = {}
    for i in positions:
        for key, tensor in [*args[i].named_parameters(remove_duplicate=False),
                            *args[i].named_buffers(remove_duplicate=False)]:
            found[f"arg{i}.{key}"] = tensor
    return found


def flat_tensors(torch: Any, inputs: tuple) -> list[Any]:
    """The flat tensors a package takes for ``inputs`` (its other leaves were fixed at export)."""
    leaves, _ = aoti.pytree().tree_flatten((inputs, {}))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def contract_and_constants(torch: Any, name: str, program: Any, args: tuple, positions: list[int], inputs: tuple,
                           proof: package_proof.Proof, flags: list[tuple[str, ...]],
                           read: dict[int, list]) -> tuple[dict[str, Any], bytes | None]:
    """The export's contract (run/steps/exported_step.py reads it) and the constants shipped beside it."""
    pytree = aoti.pytree()
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
            "dims": [_dim(i, d) for d in value.shape], "dtype": str(leaf.dtype), "device": str(leaf.device),
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
                           "structure": call_contract.structure(module), "reads": read.get(i, []),
                           "hooks": call_contract.hooks(module), "tied": _tied(named[i]), "tensors": {},
                           "train_modes": call_contract.train_modes(module),
                           "requires_grad": call_contract.requiring_grad(module)}
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
        "arity": len(args), "modes": call_contract.process_modes(), "modules": modules, "leaves": described,
        "ranges": ranges, "constants": constants, "call_spec": list(proof.call_spec),
        # "libraries" (what its model library needs of the system) is added by the build's parent
        # (builder/sets/artifact_layout.py): it reads ELF with pyelftools, which the target environment may lack.
        "cpu_features": _features(flags), "libraries": {}, "torch": torch.__version__,
    }
    blob = None
    if shipped:
        buffer = io.BytesIO()
        torch.save(shipped, buffer)
        blob = buffer.getvalue()
    return spec, blob


def training_outputs(name: str, program: Any) -> dict[str, Any]:
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


def _dim(leaf: int, size: Any) -> int | str:
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
    from hatch_precompile.builder.sets import isa

    try:
        compiler = settings.cpp_compiler()
        return isa.features(compiler, set(flags) if flags else {("-march=native",)})
    except Exception:
        return ["?unknown"]  # no CPU has it: load_step refuses the package rather than trust it
