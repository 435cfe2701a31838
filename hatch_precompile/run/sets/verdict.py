"""Whether a package's artifacts can be used here: the one decision, ``set_to_use``, and its reasons.

Everything it weighs comes in as data. The candidates: the sets the wheel ships, then those
``hatch-precompile warm`` stored for this user (artifacts.py reads both, or says why it cannot).
The facts of here (``Here``, gathered by ``here()``): this process's environment key (Python and
its ABI, torch, the CPU capability, the GPU stack: environment_key.py, gpu.py), this CPU's
features and which system libraries resolve (machine.py). A set is used when its key is this
process's, field by field, and this machine has what its kernels need; every refusal is a value
with its reason, which ``load()`` says in one line. Standard library only: ``here()`` imports
torch, which the package imports anyway, and only once there is a set to compare.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from hatch_precompile.errors import ManifestError
from hatch_precompile.protocol import Manifest, first_mismatch
from hatch_precompile.run.sets import machine


@dataclasses.dataclass(frozen=True)
class Here:
    """The facts of this process and machine that decide whether a set fits."""

    env: dict[str, Any]  # this process's environment key
    cpu_features: frozenset[str] | None  # None where they cannot be read
    missing_libraries: Callable[[dict[str, dict[str, str]]], list[str]]  # asks the dynamic loader


def here() -> Here:
    import torch  # lazily: only once there is something to compare it with

    from hatch_precompile.run.sets import environment_key

    return Here(environment_key.current(torch), machine.cpu_features(), machine.missing_libraries)


@dataclasses.dataclass(frozen=True)
class Sets:
    """The sets one place holds: the wheel's ``_precompiled`` dir, or the user's store."""

    root: Any  # a Path or a Traversable
    manifests: dict[str, bytes]  # by set name, as read
    warmed: bool  # the user's store (`hatch-precompile warm`) rather than the wheel


@dataclasses.dataclass(frozen=True)
class Chosen:
    sets: Sets
    name: str
    manifest: Manifest


@dataclasses.dataclass(frozen=True)
class Refusal:
    reason: str


def set_to_use(package: str, shipped: Sets | Refusal | None, warmed: Callable[[Callable[[], Here]], Sets | Refusal | None],
           facts: Callable[[], Here] = here) -> Chosen | Refusal | None:
    """The set ``package`` uses here: the first shipped set that fits, else the first that the
    user's store holds for this environment; None where there are none; else a Refusal naming why
    each place's sets do not fit (and the command that rebuilds for here). ``warmed`` reads the
    store when asked, given the facts (its entries are kept by environment key)."""
    facts = functools.cache(facts)
    shipped_refusal = shipped if isinstance(shipped, Refusal) else None
    if isinstance(shipped, Sets):
        picked = choose(package, shipped, facts())
        if isinstance(picked, Chosen):
            return picked
        shipped_refusal = picked
    stored = warmed(facts)
    if isinstance(stored, Sets):
        picked = choose(package, stored, facts())
        if isinstance(picked, Chosen):
            return picked
        stored = Refusal(f"warmed artifacts in {stored.root}: {picked.reason}")
    if isinstance(stored, Refusal):
        return Refusal(f"{shipped_refusal.reason}; {stored.reason}" if shipped_refusal else stored.reason)
    return shipped_refusal


def choose(package: str, sets: Sets, here: Here) -> Chosen | Refusal:
    """The set whose environment key is this process's; else a Refusal naming each set's mismatch."""
    problems, mismatched = {}, False
    for name, raw in sorted(sets.manifests.items()):
        try:
            manifest = Manifest.parse(raw)
        except ManifestError as exc:
            problems[name] = str(exc)
            continue
        why = problem(manifest, here)
        if why is None:
            return Chosen(sets, name, manifest)
        problems[name], mismatched = why, True
    if not problems:
        return Refusal("the artifact dir holds no set")
    reason = next(iter(problems.values())) if len(problems) == 1 else (
        f"none of the {len(problems)} artifact sets fits this environment: "
        + "; ".join(f"{name}: {why}" for name, why in problems.items())
    )
    if mismatched:
        from hatch_precompile.run.sets import rebuild_command  # only on this path: it reads the installed metadata

        reason += f"; {rebuild_command.rebuild(package)}"
    return Refusal(reason)


def problem(manifest: Manifest, here: Here) -> str | None:
    """Why ``manifest``'s artifacts do not fit here, or None: the first differing key field, else a
    CPU feature or a system library the kernels need and this machine lacks."""
    mismatch = first_mismatch(manifest.env, here.env)
    if mismatch is not None:
        field, built, now = mismatch
        return f"built for {field}={built!r}, this environment has {field}={now!r}"
    lacking = machine.missing_features(manifest.cpu_features, here.cpu_features)
    if lacking is None and manifest.cpu_target != "portable":
        # A portable set's kernels use only the ISA Inductor picked, which the capability and the
        # kernels' own names (their hashed command lines hold the ISA flags) already pin down.
        return (f"its kernels may use the CPU features {', '.join(manifest.cpu_features)} (built with "
                "-march=native), and this machine's CPU features cannot be read to check them")
    if lacking:
        return (f"its kernels may use CPU features this CPU lacks: {', '.join(lacking)} (built "
                f"{'with -march=native on another CPU' if manifest.cpu_target == 'native' else 'for another CPU'})")
    unresolved = here.missing_libraries(manifest.libraries)
    if unresolved:
        return f"its kernels need system libraries this machine lacks: {', '.join(unresolved)}"
    return None
