"""``hatch-precompile merge``: one wheel holding the artifact sets of wheels built on several machines.

The wheels must be the same project and version, identical byte for byte outside their artifact
sets (the code, the metadata, the tag); their sets (``<pkg>/_precompiled/sets/<name>/``) are
united, their blobs stored once, and ``RECORD`` is written anew. ``load()`` then picks the set
whose environment key is the running process's, as for a wheel built with ``cpu-capabilities``.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from hatch_precompile.protocol import BLOBS_DIR, DIRNAME, MANIFEST_FILE, SETS_DIR, Manifest, ManifestError, sha256


class MergeError(Exception):
    """The wheels cannot be merged; the message names the first reason."""


def merge(wheels: list[Path], out_dir: Path) -> tuple[Path, list[str]]:
    """Write the merged wheel into ``out_dir``; (its path, the names of its sets)."""
    if len(wheels) < 2:
        raise MergeError("give two wheels or more")
    names = {w.name for w in wheels}
    if len(names) != 1:
        raise MergeError(f"the wheels must be one project, version and tag; got {', '.join(sorted(names))}")
    members = [read_wheel(wheel) for wheel in wheels]
    first, record = members[0], record_name(members[0], wheels[0])
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
    write_wheel(target, first, merged, record)
    return target, sets


def read_wheel(wheel: Path) -> dict[str, bytes]:
    try:
        with zipfile.ZipFile(wheel) as archive:
            return {info.filename: archive.read(info) for info in archive.infolist() if not info.is_dir()}
    except (OSError, zipfile.BadZipFile) as exc:
        raise MergeError(f"cannot read {wheel}: {exc}") from None


def record_name(contents: dict[str, bytes], wheel: Path) -> str:
    records = [n for n in contents if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        raise MergeError(f"{wheel} has no single .dist-info/RECORD")
    return records[0]


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


def write_wheel(target: Path, first: dict[str, bytes], merged: dict[str, bytes], record: str) -> None:
    """The wheel: ``first``'s order, then new members sorted, a new RECORD last."""
    order = [n for n in first if n in merged] + sorted(n for n in merged if n not in first)
    lines = []
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in order:
            data = merged[name]
            archive.writestr(_info(name), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            lines.append(f"{name},sha256={digest},{len(data)}")
        lines.append(f"{record},,")
        archive.writestr(_info(record), "\n".join(lines) + "\n")


def record_problem(contents: dict[str, bytes], record: str) -> str | None:
    """What is wrong with a wheel's RECORD (a file unlisted, or listed with another hash), or None."""
    listed = {}
    for line in contents[record].decode().splitlines():
        name, digest, _size = line.rsplit(",", 2)
        listed[name] = digest
    for name, data in contents.items():
        if name == record:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if listed.get(name) != f"sha256={digest}":
            return f"RECORD lists {name} wrongly"
    return None


def _info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(2020, 2, 2, 0, 0, 0))  # reproducible, as hatchling's
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info
