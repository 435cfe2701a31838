"""Every installed package that ships artifacts, found without importing it (importing it would run
its ``load()``): whether one of its sets is valid in this environment, and why not, and how many
compiled functions it serves untraced, its own and those its dependencies compile on its behalf."""

from __future__ import annotations

import dataclasses
from importlib import metadata
from pathlib import Path
from typing import Any

from hatch_precompile.errors import ServedError, Skip
from hatch_precompile.protocol import DIRNAME, MANIFEST_FILE, SERVED_FILE, SETS_DIR, served_compiles
from hatch_precompile.run.sets import artifacts, verdict
from hatch_precompile.tools import arguments


@dataclasses.dataclass(frozen=True)
class Installed:
    package: str  # the import name load() is called with
    distribution: str
    version: str
    location: str  # its _precompiled dir
    sets: int  # how many it ships
    loading: tuple[bool, str]  # whether load() is on for it, and which rule says so
    valid: str | None  # the set load() would use here (its name), or None
    why_not: str | None  # why none is used, where none is
    own: int = 0  # its own compiled functions served untraced from that set
    by_dependencies: int = 0  # those its dependencies compile on its behalf

    def line(self) -> str:
        where = f"{self.package} {self.version} ({self.location}): {self.sets} set(s)"
        if self.valid is None:
            return f"{where}; none valid here: {self.why_not}"
        served = self.own + self.by_dependencies
        return (f"{where}; valid here: {self.valid}; serves {served} compiled function(s) untraced ({self.own} its own, "
                f"{self.by_dependencies} compiled by its dependencies); loading "
                f"{'on' if self.loading[0] else 'off'} ({self.loading[1]})")

    def as_json(self) -> dict[str, Any]:
        return {"package": self.package, "distribution": self.distribution, "version": self.version,
                "location": self.location, "sets": self.sets, "loading": self.loading[0],
                "loading_why": self.loading[1], "valid_set": self.valid, "why_not": self.why_not,
                "served": {"own": self.own, "by_dependencies": self.by_dependencies}}


def installed() -> list[Installed]:
    """Each installed package that ships artifacts (a ``_precompiled/sets/<name>/manifest.json`` in its
    distribution's files), in name order; torch is imported only where there is one to check."""
    found = []
    for dist in metadata.distributions():
        packages = {".".join(f.parts[:-4]) for f in dist.files or ()
                    if len(f.parts) > 4 and f.parts[-4:-2] == (DIRNAME, SETS_DIR) and f.parts[-1] == MANIFEST_FILE}
        for package in sorted(packages):
            root = Path(str(dist.locate_file(Path(*package.split("."), DIRNAME))))
            found.append(_checked(package, dist, root))
    return sorted(found, key=lambda i: i.package)


def _checked(package: str, dist: metadata.Distribution, root: Path) -> Installed:
    sets = sum(1 for _ in (root / SETS_DIR).iterdir()) if (root / SETS_DIR).is_dir() else 0

    def made(valid: str | None, why_not: str | None, own: int = 0, by_dependencies: int = 0) -> Installed:
        return Installed(package, dist.metadata["Name"] or package, dist.version or "?", str(root), sets,
                         arguments.enabled(package), valid, why_not, own, by_dependencies)

    chosen = artifacts.in_dir(package, root)
    if chosen is None:
        return made(None, "its sets' manifests cannot be read")
    if isinstance(chosen, verdict.Refusal):
        return made(None, chosen.reason)
    if SERVED_FILE not in chosen.manifest.files:
        return made(chosen.name, None)
    try:
        index = served_compiles.parse(chosen.read(SERVED_FILE))
    except (Skip, ServedError) as exc:
        return made(chosen.name, f"its compiled functions are traced: {exc}")
    dependencies = sum(f.made_by is not None for f in index.functions.values())
    return made(chosen.name, None, len(index.functions) - dependencies, dependencies)
