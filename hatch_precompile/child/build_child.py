"""The build's child process: run the workloads, then save what compiling produced.

Started by workload_run.py (through child/supervisor.py) with a fresh, private ``TORCHINDUCTOR_CACHE_DIR``.
Writes into the spec's ``out`` dir: the ChildResult, ``torchscript/`` and ``steps/``; the parent copies the
cache dir itself. (No Mega-Cache: nothing loads it, and its CPU kernels are source only; the cache dir
is what makes the warm start.)
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from hatch_precompile.builder.caches import empty_graphs
from hatch_precompile.builder.served import dynamo_pass
from hatch_precompile.builder.sets import isa
from hatch_precompile.builder.steps import step_capture
from hatch_precompile.child import kernel_bindings, observe, progress, workload_loop
from hatch_precompile.protocol import (
    BUILDING_VAR,
    C_MODULES_DIR,
    CACHE_DIR_VAR,
    DYNAMIC_THREADS_VAR,
    EXIT_OK,
    EXIT_WORKLOAD_FAILED,
    PACKAGE_VAR,
    SETTINGS,
    STEPS_DIR,
    STEPS_DIR_VAR,
    TORCHSCRIPT_DIR,
    TORCHSCRIPT_DIR_VAR,
    ChildResult,
    Failure,
)

# docs/reference/torch-versions.md: every minor release from OLDEST_TORCH to NEWEST_TESTED, end to end.
OLDEST_TORCH = (2, 7)
NEWEST_TESTED = (2, 15)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    out = Path(spec["out"])
    sys.path[:0] = spec["paths"]
    os.environ[BUILDING_VAR] = "1"
    os.environ[TORCHSCRIPT_DIR_VAR] = str(out / TORCHSCRIPT_DIR)
    os.environ[STEPS_DIR_VAR] = str(out / STEPS_DIR)
    os.environ[PACKAGE_VAR] = spec.get("package") or ""
    os.environ.setdefault(DYNAMIC_THREADS_VAR, "1")  # an explicit choice of the builder's stays

    started = time.perf_counter()
    progress.phase("importing torch")
    import torch
    import torch._dynamo  # noqa: F401  (torch 2.7.0 saved no Mega-Cache unless dynamo was imported first)

    from hatch_precompile.run.caches import isa_probes, triton_modules, warm_shortcuts

    warm_shortcuts.install_shortcuts()  # records this machine's ISA probes (the environment key runs them first)
    cache_dir = os.environ.get(CACHE_DIR_VAR)
    if cache_dir:  # the probe libraries an earlier build made here, which this set ships as that one did
        isa_probes.seed_libraries(cache_dir)
    triton_modules.record(out / C_MODULES_DIR)  # on a GPU: Triton's C helpers, shipped so users build none
    environment, refused = _environment_or_refusal(torch, spec.get("capability"), spec.get("device"))
    if cache_dir:
        isa_probes.keep_libraries(cache_dir)
    if refused is not None:  # before any workload runs: nothing trustworthy could be made
        workload_loop.write_result(out, refused)
        return EXIT_OK

    kernel_commands = observe.record_kernel_commands()
    compile_flags = isa.CompileFlags(portable=spec.get("cpu_target", "portable") == "portable")
    compile_flags.install()
    empty_graphs.EmptyGraphs().install()  # graphs with no call ship an entry too
    observer = observe.Observer(os.environ.get(CACHE_DIR_VAR), logs=True, lines=True)
    import_seconds = time.perf_counter() - started

    def stopped(name: str, exc: BaseException) -> ChildResult | Failure:
        cannot = _cannot_compile_cause(exc)
        if cannot:  # the machine's, not the workload's fault: the wheel is good without
            return ChildResult("cannot_compile", cannot)
        return dataclasses.replace(workload_loop.failure(name, exc), no_gpu=_no_gpu_cause(torch, exc))

    workloads, stop = workload_loop.run_workloads(spec["workloads"], observer.measure, stopped)
    if isinstance(stop, ChildResult):
        workload_loop.write_result(out, stop)
        return EXIT_OK
    if stop is not None:
        workload_loop.write_result(out, ChildResult("failed", failure=stop, workloads=workloads))
        return EXIT_WORKLOAD_FAILED

    progress.phase("saving what compiling produced")
    workload_loop.write_result(out, ChildResult("ok", workloads=workloads, data={
        **environment,
        **_machine(compile_flags, kernel_commands),
        "settings": _settings(),
        "visible": _visible(torch),
        "import_seconds": round(import_seconds, 3),
        "compile_times": _compile_times(),
        "kernel_commands": kernel_commands,
        "flag_sets": sorted(list(flag_set) for flag_set in compile_flags.flag_sets) if compile_flags.applied else None,
        "never_saved": step_capture.never_saved(spec.get("package")),
        "dynamo_pass": dynamo_pass.possible(torch),
        "extern_kernels": kernel_bindings.proven(),
    }))
    return EXIT_OK


def _environment_or_refusal(
    torch: Any, capability: str | None, device: str | None
) -> tuple[dict[str, Any], ChildResult | None]:
    """This process's environment, and why no artifact is built here (or None): this torch cannot
    make trustworthy artifacts, the machine cannot run the capability, has no usable GPU, or
    cannot build C++ kernels."""
    unsupported = supported_torch_problem(torch.__version__)
    if unsupported:
        return {}, ChildResult("unusable", unsupported)
    try:  # without a key no artifact can be trusted
        environment = _environment(torch)
    except Exception as exc:
        return {}, ChildResult("unusable", f"cannot compute the environment key with torch {torch.__version__}: {exc!r}")
    env = environment["env"]
    if str(env.get("gpu") or "").startswith("unidentified"):
        return environment, ChildResult("unusable", f"cannot name this machine's GPU for the environment key ({env['gpu']})")
    if device == "cuda":
        no_gpu = gpu_problem(torch)
        if no_gpu:
            return environment, ChildResult("no_gpu", no_gpu)
    elif not env.get("gpu"):  # CPU work: Inductor compiles C++ kernels
        cannot = compile_problem()
        if cannot:
            return environment, ChildResult("cannot_compile", cannot)
    unrunnable = capability and capability_problem(capability, env)
    if unrunnable:
        return environment, ChildResult("skipped", unrunnable)
    return environment, None


def compile_problem() -> str | None:
    """Why Inductor cannot build CPU kernels on this machine, or None (as far as can be told)."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except Exception:  # torch's internals moved: the workload finds out, and says so
        return None
    try:
        get_cpp_compiler()
    except Exception as exc:
        cause = _cannot_compile_cause(exc)
        if cause:
            return cause
        return None
    include = sysconfig.get_path("include")
    if not os.path.isfile(os.path.join(include, "Python.h")):
        return (f"Python's C headers are missing ({include}/Python.h), which every C++ kernel includes "
                "(install the package with Python's development headers, e.g. python3-dev)")
    return None


def _cannot_compile_cause(exc: BaseException | None) -> str | None:
    """Why there is no C++ compiler, when the error is torch's InvalidCxxCompiler (or wraps it)."""
    for link in workload_loop.causes(exc):
        if type(link).__name__ == "InvalidCxxCompiler" or "InvalidCxxCompiler" in str(link):
            return str(link).split("InvalidCxxCompiler:", 1)[-1].strip() or "no working C++ compiler"
    return None


def supported_torch_problem(version: str) -> str | None:
    """Why artifacts are not built with this torch, or None. Older torch lacks what capture reads."""
    found = re.match(r"(\d+)\.(\d+)", version)  # no `packaging` here: the target may not have it
    if found and (int(found[1]), int(found[2])) < OLDEST_TORCH:
        return f"torch {version} is older than {OLDEST_TORCH[0]}.{OLDEST_TORCH[1]}, the oldest hatch-precompile supports"
    if found and (int(found[1]), int(found[2])) > NEWEST_TESTED:
        workload_loop.emit("note", text=(
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
    for link in workload_loop.causes(exc):
        text = str(link).lower()
        if "cuda" in text or "nvidia" in text:
            return gpu_problem(torch)
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
    from hatch_precompile.run.caches import relocate
    from hatch_precompile.run.sets import environment_key

    return {
        "env": environment_key.current(torch),
        "python_full": sys.version.split()[0],
        "inductor_vec_isa": _vec_isa(),
        "path_values": relocate.path_values(os.path.dirname(torch.__file__), _compiler_command() or ""),
        # What torch itself ships: the libraries every user of this torch has (builder/sets/elf.py).
        "torch_libraries": sorted(
            name for name in os.listdir(os.path.join(os.path.dirname(torch.__file__), "lib")) if ".so" in name
        ) if os.path.isdir(os.path.join(os.path.dirname(torch.__file__), "lib")) else [],
    }


def _compiler_command() -> str | None:
    """The compiler Inductor resolved (``cpp.cxx``: ``CXX`` or ``g++``), or None."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        command = get_cpp_compiler()
        return command if isinstance(command, str) else None
    except Exception:
        return None


def _machine(flags: isa.CompileFlags, kernel_commands: dict[str, Any]) -> dict[str, Any]:
    """The compiler, what the kernels it built may execute (builder/sets/isa.py), and the ISA probes
    that passed (for load()'s probe shortcut, run/caches/isa_probes.py)."""
    from hatch_precompile.run.caches import isa_probes
    from hatch_precompile.run.sets import environment_key

    command = _compiler_command()
    if command is None:
        return {"compiler": None, "cpu_target": None, "cpu_features": []}
    version = environment_key.compiler_version(command)
    try:
        from torch._inductor import config

        setting = config.cpp.cxx
        setting = list(setting) if isinstance(setting, (tuple, list)) else setting
    except Exception:
        setting = None
    compiler = {"config": setting, "command": command, "version": version,
                "family": environment_key.compiler_family(command, version)}
    flag_sets = set(flags.flag_sets) if flags.applied else {
        isa.arch_flags(extra) for _, extra in kernel_commands.values()  # the hashed lines: -march=native
    }
    if not flag_sets and _built_binaries():
        # Neither the commands nor their hashed lines could be read: assume torch's x86 default, so
        # the set needs every feature of this CPU rather than none.
        flag_sets = {("-march=native",)}
    found = {"compiler": compiler, "cpu_target": flags.target}
    try:
        found["cpu_features"] = isa.features(command, flag_sets) if flag_sets else []
        found["probes"] = {p: isa.features(command, {tuple(p.split())}) for p in isa_probes.passed_probes()}
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        # A feature no CPU has: load() refuses the set's kernels rather than trust them.
        found["cpu_features"], found["probes"] = ["?unknown"], {}
        found["feature_problem"] = f"the CPU features the kernels may use cannot be told ({exc})"
    return found


def _built_binaries() -> bool:
    """Whether the cache dir holds a compiled kernel or module (a ``.so``)."""
    cache = os.environ.get(CACHE_DIR_VAR)
    return cache is not None and any(Path(cache).rglob("*.so"))


def _visible(torch: Any) -> dict[str, Any] | None:
    """The settings the workloads ran under that load() can check (run/caches/foreseen_misses.py)."""
    from hatch_precompile.child import key_variables
    from hatch_precompile.run.caches import foreseen_misses

    try:
        found = foreseen_misses.record(torch)
    except Exception:  # a torch without one of them: load() checks nothing
        return None
    # Which variables feed the keys, judged from this torch's config: load() notes only those.
    found["key_variables"] = sorted(key_variables.variables_in_keys()["key"])
    return found


def _settings() -> dict[str, Any]:
    """The Inductor settings of SETTINGS the graphs were compiled under (run/caches/cache_keys_as_built.py applies them)."""
    try:
        from torch._inductor import config

        found = {}
        for name in SETTINGS:
            section, _, field = name.rpartition(".")
            value = getattr(getattr(config, section) if section else config, field)
            if value:  # only what load() turns on; off is every process's default
                found[name] = value
        return found
    except Exception:
        return {}


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
