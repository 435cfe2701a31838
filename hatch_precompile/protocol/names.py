"""The names every side agrees on: directories and files, environment variables, exit codes,
workload and artifact names, safe paths. Standard library only: ``load()`` reads these.

Layout of ``<package>/_precompiled/`` in a wheel (or of a ``hatch-precompile warm`` entry)::

    sets/<set>/manifest.json   one artifact set per environment key (a CPU capability, a machine):
                               the Manifest (manifest.py), listing the set's files by logical path:
                                 megacache.bin          torch.compiler.save_cache_artifacts() bytes
                                 inductor/...           the Inductor cache dir (FX graph, AOTAutograd, kernels)
                                 torchscript/<name>.pt  modules recorded with save_torchscript()
                                 steps/<name>.*         steps saved with save_step() (step_files)
                                 dynamo/served.json     the package's torch.compile calls served untraced
                                 dynamo/<key>.entry     their Dynamo cache entries (served_compiles.py)
    blobs/<sha256>             every file's bytes, stored once however many sets list them

and in every wheel's ``.dist-info/extra_metadata/hatch-precompile.json``, the Declaration.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from hatch_precompile import errors as _errors

__all__ = [
    "DIRNAME",
    "SETS_DIR",
    "BLOBS_DIR",
    "MANIFEST_FILE",
    "INDUCTOR_DIR",
    "MEGACACHE_FILE",
    "TORCHSCRIPT_DIR",
    "STEPS_DIR",
    "C_MODULES_DIR",
    "DYNAMO_DIR",
    "SERVED_FILE",
    "DECLARATION_FILE",
    "DECLARATION_PATH",
    "APP",
    "GLOBAL_SWITCH",
    "PREFERENCES_VAR",
    "TARGET_VAR",
    "HEARTBEAT_VAR",
    "NO_PATCHES_VAR",
    "NO_SPEEDUPS_VAR",
    "DEBUG_VAR",
    "BUILDING_VAR",
    "TORCHSCRIPT_DIR_VAR",
    "STEPS_DIR_VAR",
    "STEPS_VERIFY_VAR",
    "NO_STEPS_VAR",
    "NO_DYNAMO_CACHE_VAR",
    "TRY_AT_IMPORT_VAR",
    "PROOF_TIMEOUT_VAR",
    "TORCH_TRACE_VAR",
    "PACKAGE_VAR",
    "CACHE_DIR_VAR",
    "DYNAMIC_THREADS_VAR",
    "BUILDER_ONLY_VARS",
    "EXIT_OK",
    "EXIT_FOUND",
    "EXIT_USAGE",
    "EXIT_WORKLOAD_FAILED",
    "EXIT_INTERRUPTED",
    "DEFAULT_TIMEOUT",
    "DEVICES",
    "CPU_TARGETS",
    "ON_FAILURE",
    "DOTTED_NAME",
    "WORKLOAD",
    "canonical_name",
    "package_switch",
    "STEP_CHECKS",
    "step_files",
    "sha256",
    "blob_path",
    "SHA256",
    "is_safe_relpath",
    "check_artifact_name",
    "FILE_KINDS",
    "file_kind",
]

# -- names ---------------------------------------------------------------------------------------

DIRNAME = "_precompiled"
SETS_DIR = "sets"
BLOBS_DIR = "blobs"
MANIFEST_FILE = "manifest.json"
INDUCTOR_DIR = "inductor"
MEGACACHE_FILE = "megacache.bin"
TORCHSCRIPT_DIR = "torchscript"
STEPS_DIR = "steps"
C_MODULES_DIR = "c_modules"  # Triton's C helper modules (cuda_utils), built by the build's process
DYNAMO_DIR = "dynamo"  # the package's torch.compile calls as Dynamo cache entries (served_compiles.py)
SERVED_FILE = f"{DYNAMO_DIR}/served.json"
DECLARATION_FILE = "hatch-precompile.json"
DECLARATION_PATH = f"extra_metadata/{DECLARATION_FILE}"  # inside a wheel's .dist-info
APP = "hatch-precompile"  # the per-user cache dir's name

# -- environment variables -------------------------------------------------------------------------

GLOBAL_SWITCH = "PRECOMPILE"  # and PRECOMPILE_<NAME> per package (package_switch)
PREFERENCES_VAR = "HATCH_PRECOMPILE_PREFERENCES"
TARGET_VAR = "HATCH_PRECOMPILE_TARGET"
HEARTBEAT_VAR = "HATCH_PRECOMPILE_HEARTBEAT"
NO_PATCHES_VAR = "HATCH_PRECOMPILE_NO_PATCHES"  # torch untouched: run/torch_internals/
NO_SPEEDUPS_VAR = "HATCH_PRECOMPILE_NO_SPEEDUPS"  # its older name
DEBUG_VAR = "HATCH_PRECOMPILE_DEBUG"  # hatch_precompile's log, debug level, on stderr (a touchpoint that failed)
BUILDING_VAR = "HATCH_PRECOMPILE_BUILDING"  # set in a build's child: load() stays off there
TORCHSCRIPT_DIR_VAR = "HATCH_PRECOMPILE_TORCHSCRIPT_DIR"  # where save_torchscript() writes
STEPS_DIR_VAR = "HATCH_PRECOMPILE_STEPS_DIR"  # where save_step() writes
STEPS_VERIFY_VAR = "HATCH_PRECOMPILE_VERIFY_STEPS"  # set in verify's child: save_step() checks the shipped step
NO_STEPS_VAR = "HATCH_PRECOMPILE_NO_STEPS"  # a build ships no step: save_step() does nothing (faster builds)
NO_DYNAMO_CACHE_VAR = "HATCH_PRECOMPILE_NO_DYNAMO_CACHE"  # no second pass: compiled functions traced (faster builds)
TRY_AT_IMPORT_VAR = "HATCH_PRECOMPILE_TRY_AT_IMPORT"  # set in the served proof's child: each entry tried at its module's import
PROOF_TIMEOUT_VAR = "HATCH_PRECOMPILE_PROOF_TIMEOUT"  # seconds a step's package may take to open and run in its proof
TORCH_TRACE_VAR = "HATCH_PRECOMPILE_TORCH_TRACE"  # a dir: torch's structured trace of a build's workloads (tlparse)
PACKAGE_VAR = "HATCH_PRECOMPILE_PACKAGE"  # in a child: the package whose artifacts it builds or checks
CACHE_DIR_VAR = "TORCHINDUCTOR_CACHE_DIR"  # torch's
# Torch's: kernels that read the thread count when they run, not the build machine's (set in a
# build's child, child/build_child.py; a user's own setting is said at load, run/caches/cache_keys_as_built.py).
DYNAMIC_THREADS_VAR = "TORCHINDUCTOR_CPP_DYNAMIC_THREADS"
# Set on build machines, not on users': each changes a torch default that is part of every cache
# key, so a build (and `verify`) runs without them. CI=true (every CI service sets it) turns on
# functorch's error_on_custom_op_aliasing from torch 2.11 on: built with it, every graph misses.
BUILDER_ONLY_VARS = ("CI",)

# -- exit codes --------------------------------------------------------------------------------

# (errors.py has them, beside the errors that carry them)
EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_WORKLOAD_FAILED, EXIT_INTERRUPTED = (
    _errors.EXIT_OK, _errors.EXIT_FOUND, _errors.EXIT_USAGE, _errors.EXIT_WORKLOAD_FAILED, _errors.EXIT_INTERRUPTED)

# -- workloads and options -------------------------------------------------------------------------

DEFAULT_TIMEOUT = 1800.0
# Where workloads run: "auto" as the build machine is, "cuda" only with a usable GPU, "cpu" with
# the GPUs hidden (CUDA_VISIBLE_DEVICES=""), for CPU machines' artifacts built on a GPU machine.
DEVICES = ("auto", "cpu", "cuda")
# Where kernels may run: "portable" sets are built without -march=native, for every CPU with the
# ISA Inductor picked; "native" ones for CPUs with every feature of the build machine's.
CPU_TARGETS = ("portable", "native")
ON_FAILURE = ("error", "warn")  # a workload's or a step's failure: fail the build, or warn and go on
DOTTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
WORKLOAD = re.compile(rf"{DOTTED_NAME.pattern}:{DOTTED_NAME.pattern}")  # "package.module:function"


def canonical_name(name: str) -> str:
    """PEP 503 normalisation (``packaging.utils.canonicalize_name``): ``Sample.Pkg`` -> ``sample-pkg``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def package_switch(name: str) -> str:
    """``sample-pkg`` / ``sample_pkg`` / ``Sample.Pkg`` -> ``PRECOMPILE_SAMPLE_PKG``."""
    return f"{GLOBAL_SWITCH}_{canonical_name(name).replace('-', '_').upper()}"


# -- steps -----------------------------------------------------------------------------------------

STEP_CHECKS = ("eager", "compile")  # what save_step() compares the captured step with


def step_files(name: str) -> dict[str, str]:
    """The logical paths of a step's files in an artifact set (which exist depends on its route):
    its contract (json); precompile's code and cache (py, cache); AOTInductor's package and the
    constants shipped beside it (pt2, constants)."""
    return {part: f"{STEPS_DIR}/{name}.{part}" for part in ("json", "py", "cache", "pt2", "constants")}


# -- files -----------------------------------------------------------------------------------------


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_path(digest: str) -> str:
    """Where the bytes with this sha256 are, relative to ``_precompiled/``."""
    return f"{BLOBS_DIR}/{digest}"


SHA256 = re.compile(r"[0-9a-f]{64}")
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=@,~-]{0,254}")
# Names Windows gives to devices, in any directory and with any extension.
_WINDOWS_DEVICES = re.compile(r"(con|prn|aux|nul|com[0-9]|lpt[0-9])(\..*)?", re.IGNORECASE)


def is_safe_relpath(path: Any) -> bool:
    """A plain relative POSIX path that stays inside the manifest's directory, on every OS.

    Each component is letters, digits and ``_.+=@,~-`` (no drive letters, backslashes, ``:``
    streams, dot-dirs, hidden names or Windows device names), as Inductor's own file names are.
    """
    if not isinstance(path, str) or not path or len(path) > 1024:
        return False
    return all(
        _COMPONENT.fullmatch(part) and not _WINDOWS_DEVICES.fullmatch(part) for part in path.split("/")
    )


_ARTIFACT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_artifact_name(name: object, what: str) -> None:
    """A name a workload gives an artifact (a TorchScript module, a step): one safe path component."""
    if not isinstance(name, str) or not _ARTIFACT_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"{what} name {name!r} must be letters, digits, '_', '-' or '.' (at most 128)")


FILE_KINDS = ("aotautograd", "fxgraph", "kernel_binary", "other_inductor", "megacache", "torchscript", "step", "c_module",
              "dynamo_entry", "other")


def file_kind(path: str) -> str:
    """Which of FILE_KINDS an artifact path is, for reports."""
    if path.startswith(f"{INDUCTOR_DIR}/aotautograd/"):
        return "aotautograd"
    if path.startswith(f"{INDUCTOR_DIR}/fxgraph/"):
        return "fxgraph"
    if path.startswith(f"{C_MODULES_DIR}/"):
        return "c_module"
    if path.endswith(".so"):
        return "kernel_binary"
    if path.startswith(f"{INDUCTOR_DIR}/"):
        return "other_inductor"
    if path == MEGACACHE_FILE:
        return "megacache"
    if path.startswith(f"{TORCHSCRIPT_DIR}/"):
        return "torchscript"
    if path.startswith(f"{STEPS_DIR}/"):
        return "step"
    if path.startswith(f"{DYNAMO_DIR}/"):
        return "dynamo_entry"
    return "other"
