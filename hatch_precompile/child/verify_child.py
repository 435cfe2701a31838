"""The child process of ``hatch-precompile verify``: load(), replay the workloads, count misses.

Started with an empty, private ``TORCHINDUCTOR_CACHE_DIR`` and without
``HATCH_PRECOMPILE_BUILDING`` (which would turn ``load()`` into a no-op): the process a user of
the package gets. Under one of verify's ``--threads`` or ``--setting``, that is applied after the
import, as a user's program would. Measures each workload as the build does (child/observe.py)
and writes its ChildResult into the spec's ``out`` dir.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from hatch_precompile.child import observe, progress, workload_loop
from hatch_precompile.protocol import CACHE_DIR_VAR, EXIT_OK, EXIT_WORKLOAD_FAILED, ChildResult


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    out = Path(spec["out"])
    package = spec["package"]
    sys.path[:0] = spec.get("paths") or []  # a build's proof imports the package from its project
    cache_dir = os.environ[CACHE_DIR_VAR]

    import torch
    import torch._dynamo  # noqa: F401  (torch first: the package's import may be what imports it)

    from hatch_precompile.run import load_caches

    observer = observe.Observer(cache_dir, logs=False)
    progress.phase(f"importing {package} and loading its artifacts")
    try:
        # Import first: the package's __init__ calls load() itself, and load() reads the
        # package through importlib.resources, which imports it.
        importlib.import_module(package)
    except BaseException as exc:
        workload_loop.write_result(out, ChildResult("failed", failure=workload_loop.failure(f"import {package}", exc)))
        return EXIT_WORKLOAD_FAILED
    status = load_caches.load(package)
    kernels_installed, _ = observe.cache_usage(cache_dir)
    try:  # as a user's program would, after importing the package and before calling it
        apply_setting(torch, spec.get("setting") or {})
    except Exception as exc:
        workload_loop.write_result(out, ChildResult("failed", failure=workload_loop.failure("--setting", exc)))
        return EXIT_WORKLOAD_FAILED

    workloads, failed = workload_loop.run_workloads(spec["workloads"], observer.measure)
    for record in workloads:
        record["kernels_compiled"] = record.pop("kernels")
    if isinstance(failed, ChildResult):  # not made by run_workloads without on_failure; as written
        workload_loop.write_result(out, failed)
        return EXIT_WORKLOAD_FAILED
    if failed is not None:
        workload_loop.write_result(out, ChildResult("failed", failure=failed, workloads=workloads))
        return EXIT_WORKLOAD_FAILED
    from hatch_precompile.builder.steps import step_verify

    workload_loop.write_result(out, ChildResult("ok", workloads=workloads, data={
        "load": {"loaded": status.loaded, "reason": status.reason, "installed": status.installed,
                 "present": status.present},
        "kernels_installed": kernels_installed,
        # what each save_step() of the workloads found (builder/steps/step_verify.py)
        "steps": step_verify.this_process.verified,
        # what became of each compiled function shipped as a Dynamo cache entry (run/served/served_compile.py)
        "served": _served(),
        "first_call": _installed_at_first_call(),
        "at_import": _installed_at_import(),
    }))
    return EXIT_OK


def _installed_at_first_call() -> list[str]:
    served_compile = sys.modules.get("hatch_precompile.run.served.served_compile")
    return served_compile.installed_at_first_call() if served_compile is not None else []


def _installed_at_import() -> list[str]:
    served_compile = sys.modules.get("hatch_precompile.run.served.served_compile")
    return served_compile.installed_at_import() if served_compile is not None else []


def _served() -> dict[str, str]:
    served_compile = sys.modules.get("hatch_precompile.run.served.served_compile")
    return served_compile.served() if served_compile is not None else {}


def apply_setting(torch: Any, setting: dict[str, Any]) -> None:
    """One of verify's ``--threads`` / ``--setting`` (tools/verify.py parses them)."""
    if "threads" in setting:
        torch.set_num_threads(int(setting["threads"]))
    if setting.get("deterministic"):
        torch.use_deterministic_algorithms(True)
    if "default_dtype" in setting:
        dtype = getattr(torch, setting["default_dtype"], None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"default-dtype={setting['default_dtype']}: torch has no such dtype")
        torch.set_default_dtype(dtype)
    if "matmul_precision" in setting:
        torch.set_float32_matmul_precision(setting["matmul_precision"])
    if "config" in setting:
        from hatch_precompile.run.torch_internals import settings

        module, name, raw = setting["config"]
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw  # a plain word: a string setting
        config = "torch._inductor.config" if module == "inductor" else "torch._functorch.config"
        try:
            settings.set_config_now("verify-setting", config, name, value)
        except AttributeError:
            raise ValueError(f"{module}.{name}: torch {torch.__version__} has no such setting") from None
        except Exception as exc:  # a config that takes no settings: say which, and why
            raise ValueError(f"{module}.{name}: torch {torch.__version__} did not take {value!r} ({exc!r})") from None
