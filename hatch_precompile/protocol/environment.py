"""The environment key: the fields that must match for a set's artifacts to be used here.

Compared exactly, in order: the first differing field is the one a skip message names.
``python_abi`` is the interpreter's SOABI: free-threaded (3.13t) and debug builds have another
C-API than the default. The C++ compiler is not among them: any compiler of the same family stands
in for the build's (Manifest.compiler); what the kernels need of the CPU and of the system's
libraries is checked as a subset (Manifest.cpu_features, Manifest.libraries).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

ENV_FIELDS = (
    "python", "python_abi", "torch", "system", "machine", "cpu_capability", "cuda", "triton", "gpu",
    "gpu_capability",
)


def env_id(env: dict[str, Any]) -> str:
    """A short stable name of an environment key (for per-user cache entries and set names)."""
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def set_name(env: dict[str, Any]) -> str:
    """The dir name of an artifact set: readable first (``avx2-...``), unique by its key."""
    capability = re.sub(r"[^a-z0-9]+", "_", str(env.get("cpu_capability") or "cpu").lower())
    return f"{capability}-{env_id(env)[:12]}"


def first_mismatch(built: dict[str, Any], here: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """(field, value at build, value here) of the first differing field, or None."""
    for field in ENV_FIELDS:
        if built.get(field) != here.get(field):
            return field, built.get(field), here.get(field)
    return None
