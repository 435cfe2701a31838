"""Every environment variable of hatch-precompile's own, read in one place (names: protocol.py).

Both sides read their variables here, when they need them (``os.environ`` by default, or the
mapping given): the switches (``PRECOMPILE``, ``PRECOMPILE_<NAME>``), the preferences file, the
build's target and heartbeat, and what a build's child sets for the code it runs. Torch's and the
system's variables (``TORCHINDUCTOR_CACHE_DIR``, ``CXX``, ``CUDA_VISIBLE_DEVICES``) are read where
they are used, as torch reads them. Standard library only: ``load()`` reads some of these.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hatch_precompile.protocol import (
    BUILDER_ONLY_VARS,
    BUILDING_VAR,
    DEBUG_VAR,
    GLOBAL_SWITCH,
    HEARTBEAT_VAR,
    NO_DYNAMO_CACHE_VAR,
    NO_PATCHES_VAR,
    NO_SPEEDUPS_VAR,
    NO_STEPS_VAR,
    PACKAGE_VAR,
    PREFERENCES_VAR,
    PROOF_TIMEOUT_VAR,
    STEPS_DIR_VAR,
    STEPS_VERIFY_VAR,
    TARGET_VAR,
    TORCH_TRACE_VAR,
    TORCHSCRIPT_DIR_VAR,
    TRY_AT_IMPORT_VAR,
    package_switch,
)

PROOF_TIMEOUT_SECONDS = 300.0  # a first CUDA process can spend a minute importing torch from a cold disk
HEARTBEAT_SECONDS = 30.0  # a workload that runs for minutes must not look hung: one line this often
OFF_VALUES = frozenset({"0", "false", "no", "off"})  # what every on/off variable of ours takes
ON_VALUES = frozenset({"1", "true", "yes", "on"})


def switch_value(var: str, raw: str) -> bool:
    """``raw`` (set, stripped) as on or off, whatever its case; ValueError naming ``var`` otherwise."""
    if raw.lower() in OFF_VALUES:
        return False
    if raw.lower() in ON_VALUES:
        return True
    raise ValueError(f"{var}={raw!r} is not a valid switch value: use one of "
                     f"{', '.join(sorted(ON_VALUES))} or {', '.join(sorted(OFF_VALUES))}")


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _text(name: str, environ: Mapping[str, str] | None) -> str:
    return _env(environ).get(name, "").strip()


def switches(name: str, environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(variable, value) of ``PRECOMPILE_<NAME>`` and ``PRECOMPILE`` that are set, in precedence order."""
    return [(var, _text(var, environ)) for var in (package_switch(name), GLOBAL_SWITCH) if _text(var, environ)]


def all_switches(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every ``PRECOMPILE`` and ``PRECOMPILE_<NAME>`` set here, by name (for ``status``)."""
    env = _env(environ)
    return {k: env[k] for k in sorted(env) if k == GLOBAL_SWITCH or k.startswith(GLOBAL_SWITCH + "_")}


def preferences_file(environ: Mapping[str, str] | None = None) -> str | None:
    return _text(PREFERENCES_VAR, environ) or None


def virtual_env(environ: Mapping[str, str] | None = None) -> str | None:
    return _text("VIRTUAL_ENV", environ) or None


def target(environ: Mapping[str, str] | None = None) -> str | None:
    """``HATCH_PRECOMPILE_TARGET``: the environment a build is for, where the frontend does not say."""
    return _text(TARGET_VAR, environ) or None


def heartbeat(environ: Mapping[str, str] | None = None) -> float:
    """Seconds between a long workload's progress lines; ValueError naming the variable."""
    return _seconds(HEARTBEAT_VAR, HEARTBEAT_SECONDS, environ)


def proof_timeout(environ: Mapping[str, str] | None = None) -> float:
    """Seconds a step's package may take to open and run in the child that proves it; ValueError
    naming the variable."""
    return _seconds(PROOF_TIMEOUT_VAR, PROOF_TIMEOUT_SECONDS, environ)


def _seconds(name: str, default: float, environ: Mapping[str, str] | None) -> float:
    raw = _text(name, environ)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name}={raw!r} must be a positive number of seconds")
    return value


def torch_trace(environ: Mapping[str, str] | None = None) -> str | None:
    """``HATCH_PRECOMPILE_TORCH_TRACE``: the dir a build writes torch's structured trace of its
    workloads into (beats the hook's ``torch-trace``); None where unset or empty."""
    return _text(TORCH_TRACE_VAR, environ) or None


def github_actions(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this runs in a GitHub Actions job (``GITHUB_ACTIONS=true``, set by its runner): a
    build folds each artifact set's lines into a group of the job's log."""
    return _text("GITHUB_ACTIONS", environ) == "true"


def _flag(name: str, environ: Mapping[str, str] | None) -> bool:
    """A flag of ours: on when set to anything but empty or an off value (``0``, ``false``, ...)."""
    raw = _text(name, environ)
    return bool(raw) and raw.lower() not in OFF_VALUES


def building(environ: Mapping[str, str] | None = None) -> bool:
    """Set in a build's child: load() stays off while the workload runs (not for ``=0``)."""
    return _flag(BUILDING_VAR, environ)


def torchscript_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """Set in a build's child: where save_torchscript() writes."""
    return _text(TORCHSCRIPT_DIR_VAR, environ) or None


def steps_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """Set in a build's child: where save_step() writes."""
    return _text(STEPS_DIR_VAR, environ) or None


def no_steps(environ: Mapping[str, str] | None = None) -> bool:
    """``HATCH_PRECOMPILE_NO_STEPS``: a build that ships no step (save_step() does nothing). Takes
    the switch's values; unset or empty is off; anything else is a ValueError naming it."""
    raw = _text(NO_STEPS_VAR, environ)
    return bool(raw) and switch_value(NO_STEPS_VAR, raw)


def no_dynamo_cache(environ: Mapping[str, str] | None = None) -> bool:
    """``HATCH_PRECOMPILE_NO_DYNAMO_CACHE``: a build without its second pass (the ``dynamo-cache``
    option set false for one build). Takes the switch's values, as ``no_steps``."""
    raw = _text(NO_DYNAMO_CACHE_VAR, environ)
    return bool(raw) and switch_value(NO_DYNAMO_CACHE_VAR, raw)


def steps_verify(environ: Mapping[str, str] | None = None) -> bool:
    """Set in verify's child: save_step() runs the shipped step against the workload's function."""
    return _flag(STEPS_VERIFY_VAR, environ)


def try_at_import(environ: Mapping[str, str] | None = None) -> bool:
    """Set in the served proof's child: each shipped entry is tried at its module's import."""
    return _flag(TRY_AT_IMPORT_VAR, environ)


def package(environ: Mapping[str, str] | None = None) -> str | None:
    """Set in a child: the package whose artifacts it builds or checks."""
    return _text(PACKAGE_VAR, environ) or None


def debug_log(environ: Mapping[str, str] | None = None) -> None:
    """``HATCH_PRECOMPILE_DEBUG=1``: the ``hatch_precompile`` log (a touchpoint that failed, each
    load's result), debug level, on stderr; once per process."""
    import logging

    logger = logging.getLogger("hatch_precompile")
    if _text(DEBUG_VAR, environ) in ("", "0") or getattr(logger, "_hatch_precompile_debug", False):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger._hatch_precompile_debug = True  # type: ignore[attr-defined]


def no_patches(environ: Mapping[str, str] | None = None) -> bool:
    """``HATCH_PRECOMPILE_NO_PATCHES`` (or ``..._NO_SPEEDUPS``): leave torch's internals as they are."""
    return _flag(NO_PATCHES_VAR, environ) or _flag(NO_SPEEDUPS_VAR, environ)


def as_on_users_machines(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """``environ`` without the build machine's own variables (BUILDER_ONLY_VARS), and those removed."""
    removed = [name for name in BUILDER_ONLY_VARS if name in environ]
    return {k: v for k, v in environ.items() if k not in removed}, [f"{name}={environ[name]}" for name in removed]
