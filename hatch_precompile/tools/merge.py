"""``hatch-precompile merge``: one wheel holding the artifact sets of wheels built on several machines.

The wheels must be the same project and version, identical byte for byte outside their artifact
sets (the code, the metadata, the tag); their sets (``<pkg>/_precompiled/sets/<name>/``) are
united, their blobs stored once, and ``RECORD`` is written anew. ``load()`` then picks the set
whose environment key is the running process's, as for a wheel built with ``cpu-capabilities``.
"""

from __future__ import annotations

from pathlib import Path

from hatch_precompile.errors import PrecompileError
from hatch_precompile.protocol import BLOBS_DIR, DIRNAME, MANIFEST_FILE, SETS_DIR, Manifest, ManifestError, sha256
from hatch_precompile.tools import wheelfile


class MergeError(PrecompileError):
    """The wheels cannot be merged; the message names the first reason."""


def merge(wheels: list[Path], out_dir: Path) -> tuple[Path, list[str]]:
    """Write the merged wheel into ``out_dir``; (its path, the names of its sets)."""
    if len(wheels) < 2:
        raise MergeError("give two wheels or more")
    names = {w.name for w in wheels}
    if len(names) != 1:
        raise MergeError(f"the wheels must be one project, version and tag; got {', '.join(sorted(names))}")
    members = [wheelfile.read_wheel(wheel) for wheel in wheels]
    first, record = members[0], wheelfile.record_name(members[0], wheels[0])
    merged: dict[str, bytes] = {}
    for wheel, contents in zip(wheels, members):
        _check_same_outside_sets(wheels[0], first, wheel, contents, record)
        for name, data in contents.items():
            if name == record:
                continue
            if _is_artifact(name) and name in merged and merged[name] != data:
                raise MergeError(f"{wheel}: {name} differs from the same set in {wheels[0]} (the same machine twice?)")
            merged.setdefault(name, data)
    sets = _check_sets(merged)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheels[0].name
    wheelfile.write_wheel(target, first, merged, record)
    return target, sets


def _is_artifact(name: str) -> bool:
    return f"/{DIRNAME}/{SETS_DIR}/" in f"/{name}" or f"/{DIRNAME}/{BLOBS_DIR}/" in f"/{name}"


def _check_same_outside_sets(
    base: Path, base_contents: dict[str, bytes], wheel: Path, contents: dict[str, bytes], record: str
) -> None:
    outside = lambda files: {n for n in files if not _is_artifact(n) and n != record}  # noqa: E731
    for name in sorted(outside(base_contents) | outside(contents)):
        if name not in contents or name not in base_contents:
            where = wheel if name in contents else base
            raise MergeError(f"{name} is only in {where}: the wheels differ outside their artifact sets")
        if contents[name] != base_contents[name]:
            raise MergeError(
                f"{name} differs between {base} and {wheel}: the wheels differ outside their "
                "artifact sets (build them from the same source)"
            )


def _check_sets(merged: dict[str, bytes]) -> list[str]:
    """The merged sets' names, once every file each lists is there with its hash."""
    sets = []
    for name, data in sorted(merged.items()):
        if not (_is_artifact(name) and name.endswith(f"/{MANIFEST_FILE}")):
            continue
        prefix = name.split(f"/{SETS_DIR}/", 1)[0]
        try:
            manifest = Manifest.parse(data)
        except ManifestError as exc:
            raise MergeError(f"{name}: {exc}") from None
        for path, entry in manifest.files.items():
            blob = merged.get(f"{prefix}/{BLOBS_DIR}/{entry.sha256}")
            if blob is None or sha256(blob) != entry.sha256:
                raise MergeError(f"{name} lists {path}, whose blob is missing or altered")
        sets.append(name.split(f"/{SETS_DIR}/", 1)[1].split("/", 1)[0])
    if not sets:
        raise MergeError("the wheels hold no artifact set (built with PRECOMPILE=0?)")
    return sets


