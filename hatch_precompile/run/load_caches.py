"""``load(package)``: install a package's precompiled caches into this process's. Never raises.

Order of work, cheapest first: the switch (no torch import when off), the artifacts' presence and
manifest, the environment key (imports torch, which the package imports anyway), then the sha256
of every file to install, then the install itself (artifacts.py, cache_install.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import warnings
from pathlib import Path

from hatch_precompile.errors import GateValueError, PrecompileWarning, Skip
from hatch_precompile.protocol import CACHE_DIR_VAR, SERVED_FILE
from hatch_precompile.run import switch, variables
from hatch_precompile.run.caches import cache_install, cache_keys_as_built, foreseen_misses
from hatch_precompile.run.sets import artifacts, environment_key
from hatch_precompile.run.torch_internals import import_hook, registry

log = logging.getLogger("hatch_precompile")


@dataclasses.dataclass(frozen=True)
class LoadResult:
    package: str
    loaded: bool
    reason: str
    installed: int = 0  # files written into the cache dir by this call
    present: int = 0  # files that were already there
    cache_dir: str | None = None
    artifact_set: str | None = None  # the set used (sets/<name>), when one was
    notes: tuple[str, ...] = ()  # installed, but this process will still compile these (why)

    def __bool__(self) -> bool:
        return self.loaded


_results: dict[str, LoadResult] = {}
_lock = threading.RLock()  # re-entrant: load("pkg") imports pkg, whose __init__ calls load("pkg")


def load(package: str) -> LoadResult:
    """Install ``package``'s shipped caches into this process's Inductor cache dir.

    Call it as ``hatch_precompile.load(__name__)`` from the package's ``__init__``. Returns a
    LoadResult; on any problem it skips, warns once with the reason, and returns a falsy result.
    """
    with _lock:
        if package in _results:
            return _results[package]
        try:
            result = _load(package)
        except Skip as skip:
            result = LoadResult(package, False, str(skip))
            report_skip(result)
        except Exception as exc:  # a broken artifact must never break `import package`
            result = LoadResult(package, False, f"unexpected error: {exc!r}")
            report_skip(result)
        _results[package] = result
        log.debug("%s", result)
        return result


def results() -> list[LoadResult]:
    """What load() did for each package in this process, in the order it was asked."""
    with _lock:
        return list(_results.values())


_warned: set[str] = set()


def report_skip(result: LoadResult) -> None:
    """The one user-visible report of a skip: a PrecompileWarning, once per message."""
    _warn_once(f"hatch-precompile: not using {result.package}'s precompiled caches: {result.reason}", 5)


def _warn_once(message: str, stacklevel: int) -> None:
    if message in _warned:
        return
    _warned.add(message)
    log.info(message)
    warnings.warn(message, PrecompileWarning, stacklevel=stacklevel)


def note_once(note: str) -> None:
    """A note about every package loaded (what this process will compile anyway), once."""
    for package in list(_installed):
        _warn_once(f"hatch-precompile: {package}'s precompiled caches are installed, but {note}", 4)


def disabled_reason(package: str) -> str | None:
    """Why loading is off for ``package`` (a quiet skip, but for an invalid switch value), or None."""
    if variables.building():
        return "a precompile workload is running"
    try:
        enabled, why = switch.enabled(package, default=True)
    except GateValueError as exc:  # off, as a value set to turn it off would be, and said once
        _warn_once(f"hatch-precompile: {exc}; precompiled caches are not loaded while it is set so", 5)
        return str(exc)
    return None if enabled else f"disabled by {why}"


def _load(package: str) -> LoadResult:
    reason = disabled_reason(package)
    if reason:
        return LoadResult(package, False, reason)
    found = artifacts.find(package)
    if found is None:
        return LoadResult(package, False, "no precompiled artifacts shipped")
    cache_dir = cache_install.inductor_cache_dir()
    installed, present = _install(found, cache_dir)
    _installed[package] = (found, cache_dir)
    notes = tuple(cache_keys_as_built.match_build_keys(found.manifest, note_once)) + tuple(
        foreseen_misses.contradictions(found.manifest.visible, str(found.manifest.env.get("torch") or "")))
    for note in notes:  # what this process will compile anyway, said before it happens
        _warn_once(f"hatch-precompile: {package}'s precompiled caches are installed, but {note}", 4)
    import_hook.after_import(registry.CODECACHE, _follow_cache_dir)
    if SERVED_FILE in found.manifest.files:  # the package's torch.compile calls, served untraced
        import torch

        from hatch_precompile.run.served import served_compile

        traced = served_compile.intercept(package, found, torch)
        if traced:
            notes += (traced,)
    if found.manifest.env.get("gpu"):
        from hatch_precompile.run.caches import triton_modules, tuned_configs

        tuned_configs.point_kernels_at_tuned_configs()
        triton_modules.serve(found)
    if found.manifest.kernels:
        from hatch_precompile.run.caches import warm_shortcuts
        from hatch_precompile.run.sets import machine

        warm_shortcuts.install_shortcuts(found.manifest, machine.cpu_features())
    reason = f"installed from {found.root} (hatch-precompile warm)" if found.warmed else "installed"
    return LoadResult(package, True, reason, installed, present, str(cache_dir), found.name, notes)


_installed: dict[str, tuple[artifacts.ArtifactSet, Path]] = {}


def _install(found: artifacts.ArtifactSet, cache_dir: Path) -> tuple[int, int]:
    torch_dir = None
    if found.manifest.kernels:
        import torch  # already imported by the environment check

        torch_dir = os.path.dirname(torch.__file__)
    destinations = cache_install.destinations(found, torch_dir, environment_key.cxx_command())
    return cache_install.install(found, destinations, cache_dir)


def _follow_cache_dir(codecache: object) -> None:
    """Before the first compile: if ``TORCHINDUCTOR_CACHE_DIR`` changed since load(), the files
    must be where torch will read them, so they are installed there too (or a warning says not)."""
    with _lock:
        for package, (found, installed_in) in list(_installed.items()):
            try:
                now = cache_install.inductor_cache_dir()
                if os.path.realpath(now) == os.path.realpath(installed_in):
                    continue
                _install(found, now)
                _installed[package] = (found, now)
            except Skip as skip:
                report_skip(LoadResult(package, False, (
                    f"{CACHE_DIR_VAR} changed after load() and the artifacts cannot go to the new dir: "
                    f"{skip}; the first compile will not use them"
                )))
