"""An exported step proven before it ships: in a process of its own, then against ``fn``.

Before the build's process opens the package, a fresh process opens and runs it
(child/package_proof.py): torch's loader can crash the process that opens a package (a segfault
on some CUDA machines), and a package that takes its prover down is not shipped -- the step runs
its warm fallback, and the build goes on. The proof (torch, device, CUDA) is stored with the step;
load_step opens a package only where one holds. Then the package is loaded exactly as users load
it (run/steps/exported_step.py) and run on changed weights and inputs, and where dims may vary, on other
sizes too, against ``fn``. When the package being built already ships the step from another
torch (``bake`` under another interpreter), that package is tried here first: if it loads and
matches, it is shipped again for this torch with the proof, and nothing is compiled.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any, Callable

from hatch_precompile.builder.reporter import STDOUT
from hatch_precompile.builder.steps import export_contract, step_check
from hatch_precompile.child import package_proof, progress
from hatch_precompile.errors import LoaderCrashed, LoaderRefused, NotAvailable, Skip, StepMismatch, StepRefused
from hatch_precompile.protocol import step_files
from hatch_precompile.protocol.step_file import CONTRACT_FORMAT, EXPORTED, LOADER
from hatch_precompile.run import variables
from hatch_precompile.run.steps import exported_step
from hatch_precompile.run.torch_internals.steps import aoti


def proven_in_child(name: str, package: bytes, constants: dict[str, Any], inputs: list[Any]) -> package_proof.Proof:
    """The package opened and run in a process of its own (child/package_proof.py) before this one
    opens it: NotAvailable where the loader crashed or hung there (the step is not shipped, the
    build goes on), torch's error where it refused."""
    try:
        with progress.within(f"proving step {name!r} in a fresh process"):
            return package_proof.prove(package, constants, inputs, variables.proof_timeout())
    except LoaderCrashed as exc:
        raise NotAvailable(str(exc)) from None
    except LoaderRefused as exc:
        raise StepRefused(f"the AOTInductor loader refused the package: {exc}", LOADER) from None


def against_fn(name: str, fn: Callable, args: tuple, check: str, step: exported_step.ExportedStep, spec: dict[str, Any]) -> None:
    """The package, run as users run it, against ``fn``: on changed values, then on other sizes."""
    import torch

    def run(*call: Any) -> Any:
        try:
            return step.call(call)
        except StepRefused as exc:
            raise StepMismatch(f"step {name!r}: the exported step refused its own example: {exc}") from None

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
    pytree = aoti.pytree()
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


def reuse_shipped(name: str, fn: Callable, args: tuple, check: str, out: Path) -> Path | None:
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
            candidates = export_contract.module_tensors(args, positions)
            if shipped is not None:
                candidates.update(torch.load(io.BytesIO(shipped), weights_only=True, map_location="cpu"))
            inputs = tuple(a for i, a in enumerate(args) if i not in positions)
            proof = proven_in_child(name, package, candidates, export_contract.flat_tensors(torch, inputs))
            step = exported_step.ExportedStep(name, record["export"], package, shipped)
            against_fn(name, fn, args, check, step, record["export"])
        except Exception as exc:  # StepRefused, StepMismatch, a crashed loader, anything else: export it again
            STDOUT.warning(f"step {name!r} built on torch {record.get('torch')} does not serve torch "
                           f"{torch.__version__} ({exc}); exporting it again for this torch")
            continue
        STDOUT.info(f"step {name!r}: the package built on torch {record.get('torch')} loads and matches "
                    f"on torch {torch.__version__}: shipped for it as it is, not compiled again")
        proven = sorted({*record.get("proven", []), torch.__version__} - {record.get("torch")})
        proofs = [p for p in record.get("proofs", []) if p != proof.environment]
        record = {**record, "proofs": [*proofs, proof.environment]}
        return store(name, out, record, package, shipped, proven)
    return None


def store(name: str, out: Path, record: dict[str, Any], package: bytes, shipped: bytes | None,
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
    from hatch_precompile.run.sets import artifacts

    found = []
    for artifact_set in artifacts.all_sets(package):
        path = step_files(name)["json"]
        if path not in artifact_set.manifest.files:
            continue
        try:
            record = json.loads(artifact_set.read(path))
        except (Skip, ValueError):
            continue
        if (isinstance(record, dict) and record.get("format") == CONTRACT_FORMAT and record.get("route") == EXPORTED
                and isinstance(record.get("export"), dict)):
            found.append((artifact_set, record))  # an older format's package is exported again, not reused
    return found
