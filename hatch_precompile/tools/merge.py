"""``hatch-precompile merge``: one wheel holding the artifact sets of wheels built on several machines.

The wheels must be the same project, version, Python and ABI, identical byte for byte outside their
artifact sets (the code, the metadata); their sets (``<pkg>/_precompiled/sets/<name>/``) are
united, their blobs stored once, and ``RECORD`` is written anew. Their platform tags may differ
(one machine's kernels may need a newer glibc than another's): the merged wheel takes the least
compatible, so it installs only where every set's kernels can load. ``load()`` then picks the set
whose environment key is the running process's, as for a wheel built with ``cpu-capabilities``.
"""

from __future__ import annotations

import stat
from pathlib import Path

from hatch_precompile.errors import ManifestError, MergeError
from hatch_precompile.protocol import BLOBS_DIR, DIRNAME, MANIFEST_FILE, SETS_DIR, Manifest, sha256
from hatch_precompile.tools import wheelfile


def merge(wheels: list[Path], out_dir: Path) -> tuple[Path, list[str]]:
    """Write the merged wheel into ``out_dir``; (its path, the names of its sets)."""
    if len(wheels) < 2:
        raise MergeError("give two wheels or more")
    names = [wheelfile.wheel_name(w) for w in wheels]
    if len({(n.project, n.version, n.build, n.python, n.abi) for n in names}) != 1:
        raise MergeError(
            f"the wheels must be one project, version, Python and ABI; got {', '.join(sorted(w.name for w in wheels))}"
        )
    members = [wheelfile.read_wheel(wheel) for wheel in wheels]
    modes = [wheelfile.read_modes(wheel) for wheel in wheels]
    first, record = members[0], wheelfile.record_name(members[0], wheels[0])
    wheel_file = record.rsplit("/", 1)[0] + "/WHEEL"
    merged: dict[str, bytes] = {}
    merged_modes: dict[str, int] = {}
    for wheel, contents, mode in zip(wheels, members, modes):
        _check_same_outside_sets(wheels[0], first, wheel, contents, record, wheel_file)
        for name, data in contents.items():
            if name == record:
                continue
            if _is_artifact(name) and name in merged and merged[name] != data:
                raise MergeError(f"{wheel}: {name} differs from the same set in {wheels[0]} (the same machine twice?)")
            if not _is_artifact(name) and name in merged_modes and merged_modes[name] != mode[name]:
                raise MergeError(f"{name} has mode {_mode(mode[name])} in {wheel} and {_mode(merged_modes[name])} "
                                 f"in {wheels[0]}: the wheels differ outside their artifact sets")
            merged.setdefault(name, data)
            merged_modes.setdefault(name, mode[name])
    merged_modes.setdefault(record, modes[0][record])
    sets = _check_sets(merged)
    platforms = [platform for name in names for platform in name.platforms]
    tag = f"{names[0].python}-{names[0].abi}-{wheelfile.least_compatible(platforms)}"
    merged[wheel_file] = wheelfile.with_tag(first[wheel_file], tag)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / names[0].with_tag(tag)
    if any(target.resolve() == w.resolve() for w in wheels):
        raise MergeError(f"-o {out_dir} would overwrite the input {target}: give another directory")
    wheelfile.write_wheel(target, first, merged, record, merged_modes)
    return target, sets


def _is_artifact(name: str) -> bool:
    return f"/{DIRNAME}/{SETS_DIR}/" in f"/{name}" or f"/{DIRNAME}/{BLOBS_DIR}/" in f"/{name}"


def _check_same_outside_sets(
    base: Path, base_contents: dict[str, bytes], wheel: Path, contents: dict[str, bytes], record: str, wheel_file: str
) -> None:
    outside = lambda files: {n for n in files if not _is_artifact(n) and n != record}  # noqa: E731
    for name in sorted(outside(base_contents) | outside(contents)):
        if name not in contents or name not in base_contents:
            where = wheel if name in contents else base
            raise MergeError(f"{name} is only in {where}: the wheels differ outside their artifact sets")
        if name == wheel_file and _untagged(contents[name]) == _untagged(base_contents[name]):
            continue  # only the platform tag differs; the merged wheel takes the least compatible
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


def _mode(external_attr: int) -> str:
    return f"{stat.S_IMODE(external_attr >> 16):04o}"


def _untagged(wheel_file: bytes) -> list[str]:
    return [line for line in wheel_file.decode().splitlines() if not line.startswith("Tag:")]
