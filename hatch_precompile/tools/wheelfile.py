"""Wheels as files: read every member, write one anew with its RECORD, check what was written.

``merge`` and ``bake`` take wheels apart and put them together here; nothing else of theirs
touches the zip format. A wheel written here is reproducible (fixed member dates, as hatchling's),
and every member keeps the file mode its input had (``external_attr``: an executable stays
executable once pip installs it). ``RECORD`` is CSV, written and read with the ``csv`` module, so
that a name holding a comma or a quote stays one field.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import io
import os
import stat
import zipfile
from pathlib import Path

from packaging.tags import parse_tag
from packaging.utils import BuildTag, InvalidWheelFilename, NormalizedName, parse_wheel_filename
from packaging.version import Version

from hatch_precompile.errors import WheelError


@dataclasses.dataclass(frozen=True)
class WheelName:
    """A wheel's file name, read by ``packaging.utils.parse_wheel_filename``. ``stem`` is its
    ``name-version[-build]`` as written (a new tag goes after it); ``python``, ``abi`` and
    ``platform`` are its tag's parts as written (compressed sets like ``py2.py3`` kept whole)."""

    project: NormalizedName
    version: Version
    build: BuildTag
    stem: str
    python: str
    abi: str
    platform: str

    @property
    def platforms(self) -> list[str]:
        return sorted({tag.platform for tag in parse_tag(f"{self.python}-{self.abi}-{self.platform}")})

    def with_tag(self, tag: str) -> str:
        """This file name with another ``python-abi-platform`` tag."""
        return f"{self.stem}-{tag}.whl"


def wheel_name(wheel: Path | str) -> WheelName:
    """``wheel``'s file name, parsed; WheelError when it is not a wheel's."""
    name = Path(wheel).name
    try:
        project, version, build, _tags = parse_wheel_filename(name)
    except InvalidWheelFilename as exc:
        raise WheelError(f"{wheel} is not a wheel (name-version[-build]-python-abi-platform.whl): {exc}") from None
    # Valid: no part holds a "-" (the project's is escaped to "_"), so the last three are the tag.
    parts = name.removesuffix(".whl").split("-")
    return WheelName(project, version, build, "-".join(parts[:-3]), *parts[-3:])


def read_wheel(wheel: Path) -> dict[str, bytes]:
    try:
        with zipfile.ZipFile(wheel) as archive:
            return {info.filename: archive.read(info) for info in archive.infolist() if not info.is_dir()}
    except (OSError, zipfile.BadZipFile) as exc:
        raise WheelError(f"cannot read {wheel}: {exc}") from None


def read_modes(wheel: Path) -> dict[str, int]:
    """Each member's ``external_attr`` (its Unix file type and mode in the high 16 bits)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return {info.filename: info.external_attr for info in archive.infolist() if not info.is_dir()}
    except (OSError, zipfile.BadZipFile) as exc:
        raise WheelError(f"cannot read {wheel}: {exc}") from None


def unpack(wheel: Path, dest: Path) -> None:
    """Every member of ``wheel`` under ``dest``, with its permission bits (``extractall`` drops them)."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = archive.extract(info, dest)
            mode = stat.S_IMODE(info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                os.chmod(path, mode)


def record_name(contents: dict[str, bytes], wheel: Path) -> str:
    records = [n for n in contents if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        raise WheelError(f"{wheel} has no single .dist-info/RECORD")
    return records[0]


def write_wheel(target: Path, first: dict[str, bytes], merged: dict[str, bytes], record: str,
                modes: dict[str, int] | None = None) -> None:
    """The wheel: ``first``'s order, then new members sorted, a new RECORD last. Each member gets
    its ``external_attr`` from ``modes``; a new one is a plain file, 0644."""
    order = [n for n in first if n in merged] + sorted(n for n in merged if n not in first)
    rows = []
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in order:
            data = merged[name]
            archive.writestr(_info(name, (modes or {}).get(name)), data)
            rows.append([name, f"sha256={_digest(data)}", str(len(data))])
        rows.append([record, "", ""])
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        archive.writestr(_info(record, (modes or {}).get(record)), text.getvalue())


def record_problem(contents: dict[str, bytes], record: str) -> str | None:
    """What is wrong with a wheel's RECORD (a row that is not three CSV fields, a file unlisted,
    listed with another hash or size, or listed and absent), or None."""
    listed = {}
    for row in csv.reader(io.StringIO(contents[record].decode("utf-8"), newline="")):
        if len(row) != 3:
            return f"RECORD has a row of {len(row)} fields, not 3: {row!r}"
        listed[row[0]] = (row[1], row[2])
    for name, data in contents.items():
        if name != record and listed.pop(name, None) != (f"sha256={_digest(data)}", str(len(data))):
            return f"RECORD lists {name} wrongly"
    absent = sorted(set(listed) - {record})
    return f"RECORD lists {absent[0]}, which the wheel lacks" if absent else None


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


_PLAIN_FILE = (stat.S_IFREG | 0o644) << 16


def _info(name: str, external_attr: int | None) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(2020, 2, 2, 0, 0, 0))  # reproducible, as hatchling's
    info.create_system = 3  # Unix: installers read the mode from the high 16 bits
    info.external_attr = _PLAIN_FILE if external_attr is None else external_attr
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def least_compatible(platforms: list[str]) -> str:
    """The least compatible of platform tags: a wheel with it installs only where every one would."""
    legacy = {"manylinux1": "manylinux_2_5", "manylinux2010": "manylinux_2_12", "manylinux2014": "manylinux_2_17"}
    for old, new in legacy.items():
        platforms = [p.replace(old, new, 1) if p.startswith(old + "_") else p for p in platforms]
    if any(not p.startswith("manylinux_") for p in platforms):  # linux_x86_64: no promise to keep
        return next(p for p in platforms if not p.startswith("manylinux_"))
    from hatch_precompile.builder.sets import elf

    return elf.wheel_platform([{"tag": p, "why": "the input's or the kernels'"} for p in platforms])[0] or platforms[0]


def tags(wheel_file: bytes) -> list[str]:
    """The ``Tag:`` lines of a ``WHEEL`` file."""
    return [line.split(":", 1)[1].strip() for line in wheel_file.decode().splitlines() if line.startswith("Tag:")]


def with_tag(wheel_file: bytes, tag: str) -> bytes:
    """``WHEEL`` with the one new tag and ``Root-Is-Purelib: false`` (the kernels are native code)."""
    lines, tagged = [], False
    for line in wheel_file.decode().splitlines():
        if line.startswith("Tag:"):
            if not tagged:
                lines.append(f"Tag: {tag}")
                tagged = True
            continue
        lines.append("Root-Is-Purelib: false" if line.startswith("Root-Is-Purelib:") else line)
    if not tagged:
        lines.append(f"Tag: {tag}")
    return ("\n".join(lines).rstrip("\n") + "\n").encode()


def platforms(wheel_file: bytes) -> list[str]:
    """The platforms of a ``WHEEL`` file's tags, in their order (``packaging.tags.parse_tag``)."""
    found = [tag.platform for line in tags(wheel_file) for tag in parse_tag(line)]
    return list(dict.fromkeys(found))
