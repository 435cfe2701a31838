"""The settings a compile reads that no guard of Dynamo's holds: Inductor's, AOTAutograd's and
Dynamo's configs, and torch's own precision and backend flags, as one plain snapshot.

A cold ``torch.compile`` reads them when it traces and compiles a call, in the user's process. A
shipped entry was compiled under the build's: the build's second pass snapshots them for each
guarded code as it compiles it, and a served guarded code runs only where this process's snapshot
is the build's (run/served/unguarded_reads.py, checked when the code is first about to run). Left out:
what decides whether or how often torch compiles, or what it logs, rather than what a compile
computes (Dynamo's cache limits, its ``suppress_errors``; each config's own compile-ignored
keys; Inductor's keys its cache keys leave out), and the two settings the second pass itself sets.
"""

from __future__ import annotations

import enum
import hashlib
import inspect
import json
import re
import types
from typing import Any

from hatch_precompile.run.torch_internals.registry import lookup

# Dynamo settings that decide how often torch compiles or what it says, not what a trace computes.
NOT_READ_BY_A_TRACE = frozenset({
    "caching_precompile",  # the second pass's own (TORCH_CACHING_PRECOMPILE=1): never set in a user's process
    "cache_size_limit", "accumulated_cache_size_limit", "recompile_limit", "accumulated_recompile_limit",
    "fail_on_cache_limit_hit", "fail_on_recompile_limit_hit", "skip_code_recursive_on_cache_limit_hit",
    "skip_code_recursive_on_recompile_limit_hit", "suppress_errors", "verbose", "log_compilation_metrics",
    "record_compile_time_instruction_count", "record_runtime_overhead", "run_gc_after_compile",
    "pt2_compile_id_prefix", "automatic_dynamic_local_pgo", "automatic_dynamic_remote_pgo",
})
# AOTAutograd's: set by the second pass while it compiles (builder/served/graph_saving.py): when a backward
# compiles, not what.
SET_BY_THE_BUILD = frozenset({"force_non_lazy_backward_lowering"})
# torch's own flags a compile reads (from ``torch``; a function is called), where present. Not those
# the kernels read when they run (cuDNN's), nor those that only reflect what is installed (opt_einsum's).
TORCH_FLAGS = (
    "get_float32_matmul_precision", "backends.fp32_precision", "backends.mkldnn.enabled",
    "backends.mkldnn.matmul.fp32_precision", "backends.mkldnn.conv.fp32_precision",
    "backends.cuda.matmul.fp32_precision", "backends.cudnn.conv.fp32_precision",
    "utils.deterministic.fill_uninitialized_memory",
)

_memo: dict[Any, tuple[str, dict[str, Any]]] = {}  # by the configs' own hashes (cached by torch until one changes)


def snapshot() -> tuple[str, dict[str, Any]] | None:
    """(digest, the settings by part: ``inductor``, ``functorch``, ``dynamo``, ``torch``) now; None where
    they cannot be read."""
    lookup("compiler-settings", "read")
    try:
        from torch._dynamo import config as dynamo_config  # noqa: TID251
        from torch._functorch import config as functorch_config  # noqa: TID251
        from torch._inductor import config as inductor_config  # noqa: TID251

        flags = _torch_flags()
        key = (inductor_config.get_hash(), functorch_config.get_hash(), dynamo_config.get_hash(), flags)
        if key in _memo:
            return _memo[key]
        parts = {
            "inductor": inductor_config.save_config_portable(),
            "functorch": {k: v for k, v in functorch_config.save_config_portable().items() if k not in SET_BY_THE_BUILD},
            "dynamo": {k: v for k, v in dynamo_config.get_config_copy().items()
                       if k not in NOT_READ_BY_A_TRACE and k not in getattr(dynamo_config, "_compile_ignored_keys", ())},
            "torch": dict(flags),
        }
        plain = {part: {str(k): _plain(v) for k, v in values.items()} for part, values in parts.items()}
        found = digest(plain), plain
    except Exception:  # a torch whose configs read otherwise: served nowhere
        return None
    if len(_memo) > 64:
        _memo.clear()
    _memo[key] = found
    return found


def digest(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def differences(build: dict[str, Any], here: dict[str, Any], parts: tuple[str, ...] | None = None) -> list[str]:
    """Each setting that differs (of ``parts``, else all), in words: ``torch._inductor.config.fallback_random
    is True here, False when the build compiled``."""
    owners = {"inductor": "torch._inductor.config.", "functorch": "torch._functorch.config.",
              "dynamo": "torch._dynamo.config.", "torch": "torch."}
    said = []
    for part in sorted((set(build) | set(here)) & set(parts or owners)):
        mine, theirs = here.get(part, {}), build.get(part, {})
        for name in sorted(set(mine) | set(theirs)):
            if mine.get(name, "<unset>") != theirs.get(name, "<unset>"):
                said.append(f"{owners.get(part, part + '.')}{name} is {_shown(mine.get(name, '<unset>'))} here, "
                            f"{_shown(theirs.get(name, '<unset>'))} when the build compiled")
    return said


COMPILED_BY_THE_BACKEND = ("inductor", "functorch", "torch")  # what compile_fx reads, outside any call


def none_compiled_under(built: dict[str, dict[str, Any]], here: tuple[str, dict[str, Any]] | None) -> str | None:
    """Why none of a function's guarded codes, compiled under the settings ``built`` (by digest), was
    compiled under this process's (``here``, a snapshot), or None. Dynamo's are left to each guarded
    code's first run: a call of the compiled object sets some of them (``dynamic=False``) while it runs."""
    if here is None:
        return "this process's compiler settings cannot be read"
    if here[0] in built:
        return None
    said: list[str] = []
    for settings in built.values():
        said = differences(settings, here[1], COMPILED_BY_THE_BACKEND)
        if not said:
            return None
    return said[0] if said else None


def _torch_flags() -> tuple[tuple[str, Any], ...]:
    import torch

    found = []
    for name in TORCH_FLAGS:
        value: Any = torch
        try:
            for part in name.split("."):
                value = getattr(value, part)
            if callable(value):
                value = value()
        except Exception:  # an older torch without it
            continue
        found.append((name, _plain(value)))
    return tuple(found)


def _plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON that is the same in every process where it is the same: sets in order, a
    function or class by its name, nothing by its address."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth > 6:
        return "<deep>"
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, dict):
        return {str(_plain(k, depth + 1)): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v, depth + 1) for v in value), key=repr)
    if isinstance(value, types.ModuleType):
        return f"<module {value.__name__}>"
    if inspect.isclass(value) or callable(value):
        return f"<{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__qualname__)}>"
    return re.sub(r"0x[0-9a-fA-F]+", "0x?", repr(value))


def _shown(value: Any) -> str:
    return value if isinstance(value, str) and value.startswith("<") else repr(value)
