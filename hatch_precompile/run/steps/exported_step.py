"""An exported step: an AOTInductor package run by torch's C++ loader, with the caller's weights.

No compiler in the process: the package's model library was built at wheel build
(builder/steps/export.py); loading it is a zip extract and a ``dlopen`` (``torch._C._aoti``), and neither
Dynamo nor Inductor is imported. The package holds no tensor of the step's modules, of any size:
each call binds the tensors of the module it is given (or of a mapping of its weights, in
``state_dict`` names) as the model's constants, in place (``user_managed``), so
``load_state_dict``, an optimizer step or weights read at run time are what the next call computes
with. Tensors a checkpoint does not hold (buffers that are not persistent, tensors the trace
lifted) are shipped beside the package.

Every call is checked against the export's contract (run/steps/call_contract.py): the process modes, eval
mode, the module's structure (class, submodules, tensors: in full when the module or its tensors
change, by identity otherwise), the plain values the trace read (attributes, config fields) and
the hooks, at every call, and each input's dtype, layout and dims inside the exported ranges. A
call that does not fit raises StepRefused with its kind and reason, and the caller runs its fallback.
"""

from __future__ import annotations

import atexit
import io
import os
import tempfile
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from hatch_precompile.errors import StepRefused
from hatch_precompile.protocol.step_file import EXPORTED, INPUTS, LOADER, MODES, MODULE, PLANNED, SETTINGS
from hatch_precompile.run.sets import machine
from hatch_precompile.run.steps import call_contract
from hatch_precompile.run.torch_internals import module_state
from hatch_precompile.run.torch_internals.steps import aoti

ROUTE = EXPORTED


def loader_problem(torch: Any) -> str | None:
    """Why this torch has no C++ loader the route can use, or None."""
    loader = aoti.aoti_loader(torch)
    if loader is None:
        return f"torch {torch.__version__} has no AOTInductor C++ loader (torch._C._aoti.AOTIModelPackageLoader)"
    if not hasattr(loader, "load_constants") or not hasattr(loader, "get_constant_fqns"):
        return f"torch {torch.__version__}'s AOTInductor loader cannot take the caller's weights (no load_constants)"
    if not aoti.aoti_binds_in_place(loader):
        return (f"torch {torch.__version__}'s AOTInductor loader cannot use the caller's weights in place (its "
                "load_constants has no user_managed): an in-place update would not be seen")
    return None


class ExportedStep:
    """A loaded package and the contract it serves; ``call(args)`` runs it or raises StepRefused."""

    def __init__(self, name: str, spec: dict[str, Any], package: bytes, shipped: bytes | None) -> None:
        import torch

        problem = loader_problem(torch)
        if problem:
            raise StepRefused(problem, LOADER)
        lacking = machine.missing_features(spec.get("cpu_features") or [], machine.cpu_features())
        if lacking is None and spec.get("cpu_features"):
            raise StepRefused("this machine's CPU features cannot be read to check those its kernels use", LOADER)
        if lacking:
            raise StepRefused(f"its kernels use CPU features this CPU lacks: {', '.join(lacking)}", LOADER)
        unresolved = machine.missing_libraries(spec.get("libraries") or {})
        if unresolved:
            raise StepRefused(f"its model library needs system libraries this machine lacks: {', '.join(unresolved)}",
                              LOADER)
        self.name = name
        self.spec = spec
        self.ranges = {k: list(v) for k, v in spec["ranges"].items()}
        self._loader = open_package(torch, package)
        needed = set(self._loader.get_constant_fqns())
        if needed != set(spec["constants"]):
            raise StepRefused(f"the package asks for the constants {sorted(needed ^ set(spec['constants']))[:5]} "
                              "otherwise than its contract", LOADER)
        self._shipped = _shipped_constants(torch, shipped) if shipped else {}
        self._pytree = aoti.pytree()
        self._in_spec = _spec(self._pytree, spec["call_spec"][0])
        self._out_spec = _spec(self._pytree, spec["call_spec"][1])
        self._modules = {int(k): v for k, v in spec["modules"].items()}
        self._training: dict[str, Any] | None = spec.get("training")  # the loss and its gradients
        self._bound: dict[int, _BoundArgument] = {}
        self._lock = threading.Lock()
        self._opened_in = os.getpid()  # a forked child's copy shares this process's extracted directory
        _close_at_exit(self)

    def call(self, args: tuple) -> Any:
        """The step's result for ``args``; StepRefused (before anything ran) when they do not fit."""
        if len(args) != self.spec["arity"]:
            raise StepRefused(f"called with {len(args)} arguments, exported with {self.spec['arity']}", INPUTS)
        if call_contract.process_modes() != self.spec["modes"]:
            raise StepRefused(f"the process modes {call_contract.process_modes()} differ from the export's "
                              f"{self.spec['modes']}", MODES)
        inputs = tuple(a for i, a in enumerate(args) if i not in self._modules)
        flat = self._inputs(inputs)
        with self._lock:
            fresh = {}  # bound into the loader only once every argument passed: a refusal binds nothing
            for position, recorded in self._modules.items():
                bound = self._bound.get(position)
                if bound is None or not bound.unchanged_since_check(args[position]):
                    bound = fresh[position] = _BoundArgument.from_full_check(args[position], position, recorded,
                                                                             self._training is not None)
                bound.check_settings(position)
            if self._loader is None:
                raise StepRefused("its package was closed as the interpreter exits", LOADER)
            if fresh:
                self._bound.update(fresh)
                self._bind()
            outputs = self._loader.run(flat)
            if self._training is not None:
                return self._gradients(outputs)
        return self._pytree.tree_unflatten(outputs, self._out_spec)

    def _gradients(self, outputs: list[Any]) -> Any:
        """A training step's outputs as ``loss.backward()`` leaves them: each gradient in its
        parameter's ``.grad`` (added where one is there), the loss returned detached. The buffers
        it updates (batch norm's statistics) the package wrote into the caller's, in place."""
        training = self._training or {}
        if len(outputs) != training["outputs"]:
            raise RuntimeError(f"the training package returned {len(outputs)} outputs, its contract says "
                               f"{training['outputs']}")
        for index, position, name in training["grads"]:
            parameter, grad = self._bound[position].tensors[name], outputs[index]
            if parameter.grad is None:
                parameter.grad = grad
            else:
                parameter.grad.add_(grad)
        return outputs[training["loss"]].detach()

    def _inputs(self, inputs: tuple) -> list[Any]:
        """The flat tensors the package takes, once each leaf is what the export allows."""
        import torch

        leaves, spec = self._pytree.tree_flatten((inputs, {}))
        if spec != self._in_spec:
            raise StepRefused(f"the inputs' structure {spec} is not the export's {self._in_spec}", INPUTS)
        sizes: dict[str, int] = {}
        flat = []
        for i, (leaf, want) in enumerate(zip(leaves, self.spec["leaves"])):
            if "value" in want:
                if isinstance(leaf, torch.Tensor) or [type(leaf).__name__, repr(leaf)] != want["value"]:
                    raise StepRefused(f"input {i} is {leaf!r:.80}, exported for {want['value'][1]} only", INPUTS)
                continue
            if not isinstance(leaf, torch.Tensor):
                raise StepRefused(f"input {i} is a {type(leaf).__name__}, exported as a tensor", INPUTS)
            problem = _tensor_problem(leaf, want, sizes, self.ranges)
            if problem:
                raise StepRefused(f"input {i}: {problem}", INPUTS)
            flat.append(leaf)
        return flat

    def _bind(self) -> None:
        """The model's constants, in place: the caller's tensors, then those the package ships."""
        constants = {}
        for fqn, source in self.spec["constants"].items():
            found = self._bound[source[1]].tensors.get(source[2]) if source[0] == "arg" else None
            if found is None:
                found = self._shipped.get(fqn)
            if found is None:
                raise StepRefused(f"no tensor for the constant {fqn}", MODULE)
            constants[fqn] = found
        try:
            aoti.aoti_bind(self._loader, constants)
        except Exception as exc:
            self._bound.clear()
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise StepRefused(f"the loader did not take the weights: {type(exc).__name__}: {first}", LOADER) from None


class _BoundArgument:
    """One module argument (or mapping of its weights) as bound into the package, and the identity
    of everything that made the full check pass: a later call with it unchanged skips that check.
    What the trace read and the hooks are checked at every call (``check_settings``)."""

    def __init__(self, obj: Any, tensors: dict[str, Any], slots: list[tuple[Any, str, Any]], modules: list[Any],
                 reads: list[tuple[Any, str, str, tuple[str, ...], str]], hook_dicts: list[dict[int, Any]]) -> None:
        self.obj, self.tensors, self.slots, self.modules = obj, tensors, slots, modules
        self.reads, self.hook_dicts = reads, hook_dicts
        self.hooks = call_contract.hook_keys(hook_dicts)
        self.pointers = tuple(t.data_ptr() for t in tensors.values())
        self.modes = tuple(m.training for m in modules)
        self.grads = tuple(t.requires_grad for t in tensors.values())

    def unchanged_since_check(self, obj: Any) -> bool:
        """Whether ``obj`` is the bound object with its train()/eval() flags, submodules, tensors,
        their requires_grad and storage as they were at the full check: then that check is skipped."""
        if obj is not self.obj:
            return False
        if tuple(m.training for m in self.modules) != self.modes:
            return False  # train() or eval() since: checked in full
        if any(container.get(key) is not value for container, key, value in self.slots):
            return False  # a submodule, parameter or buffer was replaced
        if tuple(t.requires_grad for t in self.tensors.values()) != self.grads:
            return False  # frozen or unfrozen since
        return tuple(t.data_ptr() for t in self.tensors.values()) == self.pointers  # `.data =`, `.to()`

    def check_settings(self, position: int) -> None:
        """What the trace read, and the hooks, as they are now: an in-place change refuses."""
        problem = call_contract.reads_problem(self.reads, position)
        if problem:
            raise StepRefused(f"{problem} (the exported code holds the value at build)", SETTINGS)
        if call_contract.hook_keys(self.hook_dicts) != self.hooks:
            raise StepRefused(f"argument {position}'s hooks changed since it was checked (the exported code runs "
                              "none)", SETTINGS)

    @classmethod
    def from_full_check(cls, obj: Any, position: int, recorded: dict[str, Any],
                        training: bool = False) -> "_BoundArgument":
        """``obj`` bound, once checked in full against what the export recorded of the module at
        ``position`` (``training``: for a training step, whose modes and frozen parameters are the
        build's); StepRefused where it does not fit."""
        import torch

        if isinstance(obj, torch.nn.Module):
            modes = call_contract.train_modes(obj)
            if not training and any(modes):
                raise StepRefused(f"argument {position} is in train() mode; the step was exported in eval()", PLANNED)
            if training and not any(modes):
                raise StepRefused(f"argument {position} is in eval() mode; the training step was exported in train()",
                                  PLANNED)
            difference = call_contract.modes_difference(obj, recorded["train_modes"], position)
            if difference:
                raise StepRefused(difference, MODES)
            difference = call_contract.structure_difference(recorded["structure"], call_contract.structure(obj))
            if difference:
                raise StepRefused(f"argument {position} differs from the export's: {difference}", MODULE)
            if training and call_contract.requiring_grad(obj) != recorded["requires_grad"]:
                raise StepRefused(f"argument {position}'s parameters that require gradients differ from the export's "
                                  f"({len(call_contract.requiring_grad(obj))} now, "
                                  f"{len(recorded['requires_grad'])} at build)", MODULE)
            try:
                hooks = call_contract.hooks(obj)
                dicts = call_contract.hook_dicts(list(obj.modules()))
                slots = module_state.module_slots(obj)
            except Exception as exc:  # torch's module internals are not as expected: run the fallback
                raise StepRefused(f"argument {position}'s hooks or submodules cannot be read: {exc!r}",
                                  LOADER) from None
            if hooks != recorded["hooks"]:
                raise StepRefused(f"argument {position}'s hooks differ from the export's: {hooks} now, "
                                  f"{recorded['hooks']} at build", SETTINGS)
            try:
                reads = call_contract.resolve_reads(obj, recorded["reads"], position)
            except LookupError as exc:
                raise StepRefused(str(exc), MODULE) from None
            named = dict(obj.named_parameters(remove_duplicate=False))
            named.update(obj.named_buffers(remove_duplicate=False))
            for group in recorded["tied"]:  # the package reads one of them for all
                if len({id(named.get(n)) for n in group}) != 1:
                    raise StepRefused(f"argument {position}'s {', '.join(group)} are not one tensor, as they were at "
                                      "build", MODULE)
            modules = list(obj.modules())
        elif isinstance(obj, Mapping) and not training:
            named, slots, modules, reads, dicts = dict(obj), [], [], [], []
        else:
            raise StepRefused(f"argument {position} is a {type(obj).__name__}; the step was exported with a module "
                              "there (give it, or for an inference step a mapping of its weights by state_dict name)",
                              MODULE)
        tensors = {}
        for name, want in recorded["tensors"].items():
            found = named.get(name)
            if found is None:
                if want[4]:  # a tensor a checkpoint holds
                    raise StepRefused(f"argument {position} has no tensor {name!r}", MODULE)
                continue  # a buffer that is not persistent: the package ships it
            if not isinstance(found, torch.Tensor):
                raise StepRefused(f"argument {position}[{name!r}] is a {type(found).__name__}, not a tensor", MODULE)
            got = [list(found.shape), list(found.stride()), str(found.dtype), str(found.device)]
            if got != want[:4]:
                raise StepRefused(f"argument {position}'s {name} is {got}, exported for {want[:4]} "
                                  "(shape, stride, dtype, device)", MODULE)
            tensors[name] = found
        if isinstance(obj, Mapping):
            slots = [(obj, name, t) for name, t in tensors.items()]
        return cls(obj, tensors, slots, modules, reads, dicts)


def _tensor_problem(leaf: Any, want: dict[str, Any], sizes: dict[str, int], ranges: dict[str, list]) -> str | None:
    if str(leaf.dtype) != want["dtype"] or str(leaf.device) != want["device"]:
        return f"{leaf.dtype} on {leaf.device}, exported for {want['dtype']} on {want['device']}"
    problem = call_contract.dims_problem(want["dims"], leaf.shape, sizes, ranges)
    if problem:
        return problem
    if want["stride"] is None:
        if not leaf.is_contiguous():
            return "not contiguous, exported for a contiguous tensor"
    elif list(leaf.stride()) != want["stride"]:
        return f"strides {list(leaf.stride())}, exported for {want['stride']}"
    return None


def _spec(pytree: Any, serialized: str) -> Any:
    try:
        return pytree.treespec_loads(serialized)
    except Exception as exc:  # a result type whose module is not imported registers no way to rebuild it
        raise StepRefused(f"its calling convention cannot be read here: {exc!r}", LOADER) from None


def _shipped_constants(torch: Any, blob: bytes) -> dict[str, Any]:
    try:
        loaded = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
    except Exception as exc:
        raise StepRefused(f"its shipped constants do not load: {exc!r}", LOADER) from None
    if not isinstance(loaded, dict):
        raise StepRefused("its shipped constants are not a map of tensors", LOADER)
    return loaded


def devices(spec: dict[str, Any]) -> list[str]:
    """The devices an export's tensors live on (its inputs' and its modules'), e.g. ["cpu"]."""
    found = {leaf["device"] for leaf in spec.get("leaves", []) if "device" in leaf}
    for module in spec.get("modules", {}).values():
        found.update(str(tensor[3]) for tensor in module.get("tensors", {}).values())
    return sorted(found) or ["cpu"]


def proof_environment(torch: Any, package_devices: list[str]) -> dict[str, Any]:
    """What a proof of a package holds for: this torch build, the device the package runs on (a
    GPU by its name; "cpu") and the CUDA toolkit of this torch. Asks CUDA only for a CUDA package."""
    gpu = next((d for d in package_devices if d.startswith("cuda")), None)
    if gpu is None:
        device = "cpu"
    else:
        index = int(gpu.partition(":")[2] or 0)
        device = torch.cuda.get_device_name(index) if torch.cuda.is_available() else "no CUDA device"
    return {"torch": torch.__version__, "device": device, "cuda": getattr(torch.version, "cuda", None)}


def proof_problem(record: dict[str, Any], torch: Any) -> str | None:
    """Why this process must not open the exported step of contract ``record``: no proof (a fresh
    process that opened and ran the package without crashing) holds for this torch, device and
    CUDA; None where one does. A contract from before proofs were recorded holds for its own torch
    and the torches it was proven on, on the CPU only: its build opened it in-process."""
    spec = record.get("export") or {}
    package_devices = devices(spec)
    proofs = record.get("proofs")
    if proofs is None:
        if package_devices != ["cpu"]:
            return "its package was never opened in a process of its own (built before packages were proven so)"
        proofs = [{"torch": version, "device": "cpu", "cuda": getattr(torch.version, "cuda", None)}
                  for version in [record.get("torch"), *(record.get("proven") or [])]]
    here = proof_environment(torch, package_devices)
    if any(isinstance(proof, dict) and all(proof.get(k) == v for k, v in here.items()) for proof in proofs):
        return None
    where = f"torch {here['torch']}" + ("" if here["device"] == "cpu" else f" on {here['device']} (CUDA {here['cuda']})")
    named = (f"torch {p.get('torch')}" + ("" if p.get("device") == "cpu" else f" on {p.get('device')} (CUDA {p.get('cuda')})")
             for p in proofs if isinstance(p, dict))
    proven = "; ".join(dict.fromkeys(named))  # each once, in the order they were made
    return (f"its package was proven to open and run on {proven or 'nothing'}, not on {where} (`hatch-precompile "
            "bake` under this torch on such a machine proves it)")


# The loader extracts its package into a directory of its own under the temp dir, removed when the
# loader is destroyed; a loader still referenced as the interpreter exits never is, and each process
# would leave its steps' libraries behind in /tmp. So the open steps close their loaders at exit: in
# the process that opened them only, as a forked worker's exit must not remove its parent's files.
_OPEN: weakref.WeakSet[ExportedStep] = weakref.WeakSet()
_EXIT_WAIT_SECONDS = 5.0  # a thread still running a step keeps its loader (left behind, never torn from under it)


def _close_at_exit(step: ExportedStep) -> None:
    if not _OPEN:
        atexit.unregister(_close_open_steps)  # registered once, whichever step opens first
        atexit.register(_close_open_steps)
    _OPEN.add(step)


def _close_open_steps() -> None:
    """Destroy every open step's loader, so that torch removes the directory it extracted."""
    for step in list(_OPEN):
        if step._opened_in != os.getpid():
            continue
        if step._lock.acquire(timeout=_EXIT_WAIT_SECONDS):
            try:
                step._loader = None
            finally:
                step._lock.release()


def open_package(torch: Any, package: bytes) -> Any:
    """The C++ loader on ``package`` (checked bytes), from a private file it may extract."""
    directory = tempfile.mkdtemp(prefix="hatch-precompile-step-")  # 0700
    path = os.path.join(directory, "step.pt2")
    try:
        with open(path, "xb") as handle:
            handle.write(package)
        return aoti.aoti_open(torch, path)
    except Exception as exc:
        raise StepRefused(f"the AOTInductor loader refused the package: {exc}", LOADER) from None
    finally:
        try:
            os.unlink(path)
            os.rmdir(directory)
        except OSError:
            pass
