"""The child process of ``hatch-precompile verify``: load(), replay the workloads, count misses.

Started with an empty, private ``TORCHINDUCTOR_CACHE_DIR`` and without
``HATCH_PRECOMPILE_BUILDING`` (which would turn ``load()`` into a no-op): the process a user of
the package gets. Writes ``result.json`` into the spec's ``out`` dir.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

from hatch_precompile._child import (
    EXIT_WORKLOAD_FAILED,
    _clear_compilation_metrics,
    _unlimited_compilation_metrics,
    cache_usage,
    compiled_graphs,
    delta,
    recompiles,
    resolve,
    snapshot,
)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    out = Path(spec["out"])
    package = spec["package"]
    cache_dir = os.environ["TORCHINDUCTOR_CACHE_DIR"]

    import torch  # noqa: F401
    import torch._dynamo
    import torch._dynamo.utils as dynamo_utils
    from torch._dynamo.utils import counters, guard_failures

    from hatch_precompile import runtime

    _unlimited_compilation_metrics(dynamo_utils)
    try:
        # Import first: the package's __init__ calls load() itself, and load() reads the
        # package through importlib.resources, which imports it.
        importlib.import_module(package)
    except BaseException:
        return _failed(out, f"import {package}", traceback.format_exc())
    status = runtime.load(package)
    kernels_installed, _ = cache_usage(cache_dir)

    workloads = []
    for name in spec["workloads"]:
        before = snapshot(counters)
        guard_failures.clear()
        _clear_compilation_metrics(dynamo_utils)
        kernels_before, _ = cache_usage(cache_dir)
        t0 = time.perf_counter()
        try:
            resolve(name)()
        except BaseException:
            return _failed(out, name, traceback.format_exc())
        kernels_after, _ = cache_usage(cache_dir)
        workloads.append(
            {
                "name": name,
                "seconds": round(time.perf_counter() - t0, 3),
                "counters": delta(before, snapshot(counters)),
                "graphs": compiled_graphs(dynamo_utils),
                "recompiles": recompiles(guard_failures),
                "kernels_compiled": kernels_after - kernels_before,
            }
        )
    result = {
        "load": {
            "loaded": status.loaded,
            "reason": status.reason,
            "installed": status.installed,
            "present": status.present,
        },
        "kernels_installed": kernels_installed,
        "workloads": workloads,
    }
    (out / "result.json").write_text(json.dumps(result))
    return 0


def _failed(out: Path, workload: str, trace: str) -> int:
    (out / "result.json").write_text(json.dumps({"error": {"workload": workload, "traceback": trace}}))
    return EXIT_WORKLOAD_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
