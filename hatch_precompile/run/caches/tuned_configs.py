"""GPU kernels loaded from a shipped FX-graph entry find the configs the build tuned for them.

A statically launchable Triton kernel travels pickled inside its FX-graph entry, with the path
its source had at build time. On a hit, Inductor looks for the kernel's tuned config
(``<hash>.best_config``) beside that path: in the build's cache dir, which is gone. So every
multi-config kernel would be benchmarked again in the first process (Mega-Cache has the same
miss). The ``.best_config`` files are shipped in this cache dir's layout (``<cache>/<xx>/``);
pointing the kernel at that dir, where its own source is written at the hit, makes the tuned
config found. Hooked in through run/torch_internals/, failing safe: if torch's internals differ,
the kernel is tuned again.
"""

from __future__ import annotations

import os
from typing import Any

from hatch_precompile.run.torch_internals import patching, settings


def point_kernels_at_tuned_configs() -> None:
    """Have each kernel's autotune recheck look in this cache dir, where its tuned config is shipped."""
    patching.wrap("autotune-recheck", before=_in_cache_dir)


def in_cache_dir(filename: Any, cache_dir: str) -> Any:
    """``filename`` (``<build cache>/<xx>/<hash>.py``) moved under ``cache_dir``; other values as they are."""
    if not isinstance(filename, str) or not filename:
        return filename
    subdir, name = os.path.split(filename)
    return os.path.join(cache_dir, os.path.basename(subdir), name)


def _in_cache_dir(arguments: dict[str, Any]) -> None:
    autotuner = arguments["self"]
    autotuner.filename = in_cache_dir(autotuner.filename, settings.inductor_cache_dir())
