"""The build's child process: run the workloads, then save what compiling produced.

Started by capture.py (through child.py) with a fresh, private ``TORCHINDUCTOR_CACHE_DIR``.
Writes into the spec's ``out`` dir: ``result.json``, ``megacache.bin`` and ``torchscript/``;
the parent copies the cache dir itself. Progress goes to stdout as marked events (child.emit).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from hatch_precompile.build import child, observe

# docs/torch-versions.md: every minor release from OLDEST_TORCH to NEWEST_TESTED, end to end.
OLDEST_TORCH = (2, 7)
NEWEST_TESTED = (2, 15)
from hatch_precompile.protocol import (
    BUILDING_VAR, CACHE_DIR_VAR, EXIT_OK, EXIT_WORKLOAD_FAILED, MEGACACHE_FILE, TORCHSCRIPT_DIR, TORCHSCRIPT_DIR_VAR,
)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    out = Path(spec["out"])
    sys.path[:0] = spec["paths"]
    os.environ[BUILDING_VAR] = "1"
    os.environ[TORCHSCRIPT_DIR_VAR] = str(out / TORCHSCRIPT_DIR)

    started = time.perf_counter()
    import torch
    import torch._dynamo  # noqa: F401  (torch 2.7.0 saved no Mega-Cache unless dynamo was imported first)

    environment = _environment_or_refusal(torch, spec.get("capability"))
    no_gpu = "env" in environment and spec.get("device") == "cuda" and gpu_problem(torch)
    if no_gpu:
        environment = {"no_gpu": no_gpu}
    if "env" not in environment:  # before any workload runs: nothing trustworthy could be made
        child.write_result(out, environment)
        return EXIT_OK

    from hatch_precompile.run import speedups

    speedups.apply()  # records this machine's ISA probes for the installed package's first run
    kernel_commands = observe.record_kernel_commands()
    observer = observe.Observer(os.environ.get(CACHE_DIR_VAR), logs=True)
    import_seconds = time.perf_counter() - started

    workloads = []
    for index, name in enumerate(spec["workloads"], 1):
        child.emit("start", workload=name, index=index, total=len(spec["workloads"]))
        try:
            workloads.append(observer.measure(name, child.resolve(name)))
        except BaseException as exc:
            error = child.failure(name, exc)
            error["no_gpu"] = _no_gpu_cause(torch, exc)
            child.write_result(out, {"error": error})
            child.emit("failed", workload=name)
            return EXIT_WORKLOAD_FAILED
        child.emit("done", **workloads[-1])

    child.write_result(out, {
        **environment,
        "import_seconds": round(import_seconds, 3),
        "workloads": workloads,
        "megacache": _save_megacache(torch, out),
        "compile_times": _compile_times(),
        "kernel_commands": kernel_commands,
    })
    return EXIT_OK


def _environment_or_refusal(torch: Any, capability: str | None) -> dict[str, Any]:
    """This process's environment, or why no artifact is built here: {"unusable"} or {"skipped"}."""
    try:  # without a key no artifact can be trusted
        environment = _environment(torch)
    except Exception as exc:
        return {"unusable": f"cannot compute the environment key with torch {torch.__version__}: {exc!r}"}
    unsupported = supported_torch_problem(torch.__version__)
    if unsupported:
        return {"unusable": unsupported}
    if str(environment["env"].get("gpu") or "").startswith("unidentified"):
        return {"unusable": f"cannot name this machine's GPU for the environment key ({environment['env']['gpu']})"}
    unrunnable = capability and capability_problem(capability, environment["env"])
    if unrunnable:
        return {"skipped": unrunnable}
    return environment


def supported_torch_problem(version: str) -> str | None:
    """Why artifacts are not built with this torch, or None. Older torch lacks what capture reads."""
    found = re.match(r"(\d+)\.(\d+)", version)  # no `packaging` here: the target may not have it
    if found and (int(found[1]), int(found[2])) < OLDEST_TORCH:
        return f"torch {version} is older than {OLDEST_TORCH[0]}.{OLDEST_TORCH[1]}, the oldest hatch-precompile supports"
    if found and (int(found[1]), int(found[2])) > NEWEST_TESTED:
        child.emit("note", text=(
            f"torch {version} is newer than {NEWEST_TESTED[0]}.{NEWEST_TESTED[1]}, the newest tested: what "
            "hatch-precompile reads of torch is feature-detected, and load() checks the artifacts as always"
        ))
    return None


def gpu_problem(torch: Any) -> str | None:
    """Why this build cannot run CUDA work, or None. Initialises CUDA: the build's child only."""
    if not getattr(torch.version, "cuda", None) and not getattr(torch.version, "hip", None):
        return f"torch {torch.__version__} is a CPU-only build"
    try:
        if torch.cuda.is_available():
            return None
    except Exception as exc:
        return f"torch {torch.__version__} cannot use CUDA here: {exc}"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f"torch {torch.__version__} finds no GPU" + (f" (CUDA_VISIBLE_DEVICES={hidden!r})" if hidden is not None else "")


def _no_gpu_cause(torch: Any, exc: BaseException | None) -> str | None:
    """Why there is no GPU, when a workload failed for want of one (its error speaks of CUDA)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc).lower()
        if "cuda" in text or "nvidia" in text:
            return gpu_problem(torch)
        exc = exc.__cause__ or exc.__context__
    return None


def capability_problem(capability: str, env: dict[str, Any]) -> str | None:
    """Why this machine cannot build artifacts for ``ATEN_CPU_CAPABILITY=capability``, or None.

    ATen believes the variable (it reports AVX512 on an AVX2 CPU, then dies of SIGILL); Inductor
    checks the CPU, so its list of usable vector ISAs is what says whether the code would run.
    """
    if capability == "default":
        return None
    try:
        from torch._inductor.cpu_vec_isa import valid_vec_isa_list

        usable = {str(isa).lower() for isa in valid_vec_isa_list()}
    except Exception as exc:
        return f"cannot tell whether this machine runs {capability} code ({exc!r})"
    if capability not in usable:
        return f"this machine cannot run {capability} code (its CPU has {', '.join(sorted(usable)) or 'no vector ISA'})"
    if str(env.get("cpu_capability", "")).lower() != capability:
        return f"torch reports CPU capability {env.get('cpu_capability')} under ATEN_CPU_CAPABILITY={capability}"
    return None


def _environment(torch: Any) -> dict[str, Any]:
    from hatch_precompile.run import envkey, relocate

    return {
        "env": envkey.current(torch),
        "python_full": sys.version.split()[0],
        "inductor_vec_isa": _vec_isa(),
        "path_values": relocate.path_values(os.path.dirname(torch.__file__)),
    }


def _save_megacache(torch: Any, out: Path) -> dict[str, list[str]] | None:
    """Mega-Cache's bytes, shipped beside the cache dir; the cache dir alone makes the warm start."""
    try:
        saved = torch.compiler.save_cache_artifacts()
        if saved is None or not saved[0]:
            return None
        artifacts = {str(k): [str(key) for key in v] for k, v in saved[1].artifacts.items()}
    except Exception:
        return None
    (out / MEGACACHE_FILE).write_bytes(saved[0])
    return artifacts


def _compile_times() -> str | None:
    try:
        from torch._dynamo.utils import compile_times

        return compile_times(repr="str", aggregate=True)
    except Exception:  # a report's detail; never worth failing a build for
        return None


def _vec_isa() -> str | None:
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        return str(pick_vec_isa())
    except Exception:
        return None
