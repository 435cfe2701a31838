"""GPU kernels loaded from a shipped FX-graph entry find the configs the build tuned for them.

A statically launchable Triton kernel travels pickled inside its FX-graph entry, with the path
its source had at build time. On a hit, Inductor looks for the kernel's tuned config
(``<hash>.best_config``) beside that path: in the build's cache dir, which is gone. So every
multi-config kernel would be benchmarked again in the first process (Mega-Cache has the same
miss). The ``.best_config`` files are shipped in this cache dir's layout (``<cache>/<xx>/``);
pointing the kernel at that dir, where its own source is written at the hit, makes the tuned
config found. Patched lazily, failing safe: if torch's internals differ, the kernel is tuned again.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from hatch_precompile.run import patching

TRITON_HEURISTICS = "torch._inductor.runtime.triton_heuristics"
_MARK = "_hatch_precompile_patched"


def apply() -> None:
    patching.after_import(TRITON_HEURISTICS, _patch)


def in_cache_dir(filename: Any, cache_dir: str) -> Any:
    """``filename`` (``<build cache>/<xx>/<hash>.py``) moved under ``cache_dir``; other values as they are."""
    if not isinstance(filename, str) or not filename:
        return filename
    subdir, name = os.path.split(filename)
    return os.path.join(cache_dir, os.path.basename(subdir), name)


def _patch(module: ModuleType) -> None:
    autotuner = module.CachingAutotuner
    original = autotuner.recheck_autotune_cache
    if getattr(original, _MARK, False):
        return

    def recheck_autotune_cache(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            from torch._inductor.runtime.cache_dir_utils import cache_dir

            self.filename = in_cache_dir(self.filename, cache_dir())
        except Exception:  # the kernel keeps its recorded path and is tuned again
            pass
        return original(self, *args, **kwargs)

    setattr(recheck_autotune_cache, _MARK, True)
    autotuner.recheck_autotune_cache = recheck_autotune_cache
