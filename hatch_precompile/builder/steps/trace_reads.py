"""What a step's trace read of its modules: the plain attributes and config fields its Python looked at.

``torch.export`` (non-strict) runs the step's Python once on fake tensors; whatever plain value
that Python reads (``self.eps``, ``self.config.num_attention_heads``, ``self.gradient_checkpointing``)
is in the compiled code as a constant. While the export runs, each submodule of the step's modules,
and each config object they hold (anything with a ``to_dict()``, as transformers' configs have), is
given a subclass of its own class that records such reads, and gets its class back afterwards.
The exported contract holds those values and no others: a field the trace never read (a
classification's ``problem_type``, ``_name_or_path``, a logging flag) never refuses a call
(run/steps/call_contract.py checks the reads at every call).

A read of a module's own machinery (its hooks, parameters, ``training``) is not recorded: the
contract checks those in their own ways. Nor are the reads torch's own modules make that an
eval-mode trace does not depend on (dropout's ``p``, batch norm's ``momentum``), for a submodule in
eval(): an inference step serves a model whose dropout rate differs. In train() they are recorded.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from hatch_precompile.run.steps import call_contract

# One read: [submodule path ("" for the argument itself), the attribute that holds the config ("" for
# the module itself), the name read, its value as run/steps/call_contract.py's plain_value_text writes it,
# and where the step itself set the field, the value it left].
Read = list[str]
# Read by torch's modules in eval() without changing what they compute there.
UNUSED_IN_EVAL = {"torch.nn.modules.dropout._DropoutNd": frozenset({"p", "inplace"}),
                  "torch.nn.modules.batchnorm._NormBase": frozenset({"momentum"})}


@contextlib.contextmanager
def recording(modules: dict[int, Any]) -> Iterator[dict[int, list[Read]]]:
    """While inside, every plain read of ``modules`` (by argument position) and of their configs is
    recorded; yields ``{position: [read, ...]}``, complete once the block is left."""
    import torch

    machinery = frozenset(dir(torch.nn.Module)) | frozenset(vars(torch.nn.Module()))
    found: dict[int, dict[tuple[str, str, str], str]] = {position: {} for position in modules}
    written: dict[tuple[int, str, str, str], Any] = {}  # the value each field had before the trace set it
    swapped: list[tuple[Any, type]] = []
    seen: set[int] = set()

    def watch(obj: Any, position: int, path: str, attr: str, skip: frozenset[str]) -> None:
        if id(obj) in seen:
            return  # shared: recorded under the first path it was found at
        seen.add(id(obj))
        original = type(obj)
        getattribute: Any = original.__getattribute__  # the class's own (transformers' configs map names)
        reads = found[position]

        setattr_: Any = original.__setattr__

        def __getattribute__(self: Any, name: str) -> Any:
            value = getattribute(self, name)
            if not name.startswith("__") and name not in skip and (path, attr, name) not in reads:
                text = call_contract.plain_value_text(value)
                if text is not None:
                    reads[(path, attr, name)] = text
            return value

        def __setattr__(self: Any, name: str, value: Any) -> None:
            key = (position, path, attr, name)
            if (key not in written and not name.startswith("__") and name not in skip
                    and call_contract.plain_value_text(value)):
                written[key] = (self, vars(self).get(name, _ABSENT))
            setattr_(self, name, value)

        # Same layout (no __dict__ or slots of its own), so the instance's class may be swapped.
        recorder = type(original.__name__, (original,), {"__getattribute__": __getattribute__,
                                                          "__setattr__": __setattr__, "__slots__": (),
                                                          "__module__": original.__module__,
                                                          "__qualname__": original.__qualname__})
        object.__setattr__(obj, "__class__", recorder)
        swapped.append((obj, original))

    recorded: dict[int, list[Read]] = {}
    try:
        for position, module in modules.items():
            for path, sub in module.named_modules():
                for attr, value in list(vars(sub).items()):
                    if _config_like(torch, value):
                        watch(value, position, path, attr, frozenset())
                watch(sub, position, path, "", machinery | (frozenset() if sub.training else _unused_in_eval(sub)))
        yield recorded
    finally:
        for obj, original in reversed(swapped):
            object.__setattr__(obj, "__class__", original)
        # A field the step sets (transformers' config.problem_type on a first loss with labels): the
        # contract takes the value it read and the value it left; the workload's object gets back
        # the one it had, as the trace had not run.
        left = {}
        for (position, path, attr, name), (owner, before) in written.items():
            left[(position, path, attr, name)] = call_contract.plain_value_text(getattr(owner, name, None))
            if before is _ABSENT:
                vars(owner).pop(name, None)
            else:
                vars(owner)[name] = before
        for position, reads in found.items():
            recorded[position] = []
            for key, value in sorted(reads.items()):
                also = left.get((position, *key))
                recorded[position].append([*key, value] if also in (None, value) else [*key, value, also])


_ABSENT = object()


def _unused_in_eval(module: Any) -> frozenset[str]:
    names: frozenset[str] = frozenset()
    for cls in type(module).__mro__:
        names |= UNUSED_IN_EVAL.get(f"{cls.__module__}.{cls.__qualname__}", frozenset())
    return names


def _config_like(torch: Any, value: Any) -> bool:
    """A settings object a module holds (transformers' ``config``): read field by field."""
    if isinstance(value, (torch.nn.Module, torch.Tensor, type)) or call_contract.plain_value_text(value) is not None:
        return False
    return callable(getattr(type(value), "to_dict", None))
