"""Finding what the CLI is pointed at, without importing it: artifacts, workloads, packages.

Importing it would run its ``load()`` (and import torch) just to read a manifest. A name may be
the import name (``sample_pkg``) or the project name (``sample-pkg``); artifacts come from the
installed package, a wheel file, or the per-user cache of ``hatch-precompile warm``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

from hatch_precompile.builder import options
from hatch_precompile.errors import ManifestError, TargetNotFound
from hatch_precompile.protocol import (
    DECLARATION_PATH,
    DIRNAME,
    MANIFEST_FILE,
    SETS_DIR,
    Declaration,
    Manifest,
    validate,
)
from hatch_precompile.run.sets import usercache


@dataclasses.dataclass
class Artifacts:
    package: str  # the import name load() is called with
    origin: str  # "shipped" (in the wheel / installed package) or "warmed" (user cache)
    location: str
    raw: dict[str, Any] | None  # the manifest's JSON as it is, None if it could not be read
    manifest: Manifest | None  # the same, typed; None if it could not be
    problem: str | None = None  # why load() would not use these


def import_package(name: str) -> tuple[str, Path]:
    """(import name, package dir) of an installed package given its import or project name."""
    tried = []
    for candidate in dict.fromkeys([name, name.replace("-", "_")]):
        if not all(part.isidentifier() for part in candidate.split(".")):
            continue
        tried.append(candidate)
        try:
            spec = importlib.util.find_spec(candidate)  # imports parents of a dotted name only
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            locations = [Path(p) for p in spec.submodule_search_locations]
            shipped = [p for p in locations if (p / DIRNAME).is_dir()]
            return candidate, (shipped or locations)[0]
    found = _from_distribution(name)
    if found is not None:
        return found
    raise TargetNotFound(
        f"no installed package named {name!r}: no import package "
        f"{' or '.join(repr(t) for t in tried) or '(not a valid import name)'} on sys.path "
        f"and no installed distribution {name!r} with a top-level package"
    )


def import_name(name: str) -> str:
    """The import name of an installed package; ``name`` itself for one no longer installed."""
    try:
        return import_package(name)[0]
    except TargetNotFound:
        return name


def _from_distribution(name: str) -> tuple[str, Path] | None:
    """A project name whose import package is named otherwise (``scikit-learn`` -> ``sklearn``)."""
    try:
        dist = metadata.distribution(name)
    except (metadata.PackageNotFoundError, ValueError):
        return None
    tops = sorted(
        {f.parts[0] for f in dist.files or [] if len(f.parts) > 1 and f.name == "__init__.py"}
    )
    packages = [(top, Path(str(dist.locate_file(top)))) for top in tops]
    packages = [(top, path) for top, path in packages if path.is_dir()]
    shipped = [(top, path) for top, path in packages if (path / DIRNAME).is_dir()]
    chosen = shipped or packages
    return chosen[0] if len(chosen) == 1 else None


def installed(name: str) -> list[Artifacts]:
    """What an installed package shipped, then what `warm` stored for it, in that order: one
    entry per artifact set."""
    package, directory = import_package(name)
    found = [_read(package, "shipped", str(f.parent), f.read_bytes) for f in _set_manifests(directory / DIRNAME)]
    for entry in usercache.entries(package):
        found += [_read(package, "warmed", str(f.parent), f.read_bytes) for f in _set_manifests(entry)]
    return found


def _set_manifests(artifact_dir: Path) -> list[Path]:
    return sorted((artifact_dir / SETS_DIR).glob(f"*/{MANIFEST_FILE}"))


def in_wheel(wheel: Path) -> list[Artifacts]:
    """One entry per artifact set in ``wheel`` (of any package in it)."""
    marker = f"/{DIRNAME}/{SETS_DIR}/"
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = sorted(n for n in archive.namelist() if marker in n and n.endswith(f"/{MANIFEST_FILE}"))
            return [
                _read(
                    member.split(marker, 1)[0].replace("/", "."),
                    "shipped",
                    f"{wheel}!{member[: -len(MANIFEST_FILE) - 1]}",
                    lambda member=member: archive.read(member),
                )
                for member in members
            ]
    except (OSError, zipfile.BadZipFile) as exc:
        raise TargetNotFound(f"cannot read the wheel {wheel}: {exc}") from None


def workloads(name: str, override: list[str] | None = None) -> tuple[str, Path, list[str], str]:
    """(import name, package dir, workloads to run, where their names came from).

    ``--workload`` options first, else the names in the shipped manifest, else the declaration
    the wheel carries in its ``.dist-info`` (plain wheels too), else a manifest ``warm`` stored,
    else the conventional ``<package>.precompile:workload``.
    """
    package, directory = import_package(name)
    if override:
        return package, directory, list(override), "--workload"
    for manifest_file in _set_manifests(directory / DIRNAME):
        names = _workload_names(manifest_file)
        if names:
            return package, directory, names, str(manifest_file)
    declared = _declaration(package)
    if declared is not None and declared[0].workloads:
        return package, directory, list(declared[0].workloads), declared[1]
    for manifest_file in [f for entry in usercache.entries(package) for f in _set_manifests(entry)]:
        names = _workload_names(manifest_file)
        if names:
            return package, directory, names, str(manifest_file)
    if (directory / "precompile.py").is_file() or (directory / "precompile" / "__init__.py").is_file():
        return package, directory, [f"{package}.precompile:workload"], "the conventional name"
    raise TargetNotFound(
        f"no workload known for {package!r}: no manifest names one (shipped or warmed), its "
        f"distribution declares none and there is no {package}/precompile.py; pass --workload "
        "module:function"
    )


def declared_device(package: str) -> str:
    """The ``device`` option the package's wheel was built with ("auto" when it declares none)."""
    declared = _declaration(package)
    return declared[0].device if declared is not None else "auto"


def _workload_names(manifest_file: Path) -> list[str]:
    try:
        return [str(w["name"]) for w in json.loads(manifest_file.read_bytes())["workloads"] if w.get("name")]
    except (ValueError, AttributeError, TypeError, KeyError, OSError):
        return []


def _declaration(package: str) -> tuple[Declaration, str] | None:
    """(declaration, where it was read) of the installed distribution that ships ``package``."""
    for name in metadata.packages_distributions().get(package.split(".", 1)[0], []):
        try:
            dist = metadata.distribution(name)
            text = dist.read_text(DECLARATION_PATH)
        except (metadata.PackageNotFoundError, OSError):
            continue
        where = f"{name} {dist.version}'s {DECLARATION_PATH}"
        declared = options.read_declaration(text or "", where)
        if declared is not None and declared.package == package:
            return declared, where
    return None


def _read(package: str, origin: str, location: str, read: Any) -> Artifacts:
    try:
        raw = json.loads(read())
    except (OSError, ValueError, KeyError) as exc:
        return Artifacts(package, origin, location, None, None, f"manifest.json cannot be read: {exc}")
    problem = None
    try:
        validate(raw)
    except ManifestError as exc:
        problem = str(exc)  # still shown: a report is for looking at what is there
    try:
        manifest = (Manifest.from_data(raw) if problem is None else Manifest.as_written(raw)) if isinstance(raw, dict) else None
    except (TypeError, KeyError, AttributeError, ValueError) as exc:  # a hand-edited manifest
        manifest, problem = None, problem or f"manifest.json cannot be summarised: {exc!r}"
    return Artifacts(package, origin, location, raw if isinstance(raw, dict) else None, manifest, problem)
