"""``manifest.json``: what one artifact set is, where it is valid, and what made it.

Every field is read through its check (fields.py): what decides whether native code runs (the
environment key, the files and their hashes, what the kernels need of the machine, the settings
load() applies) is checked strictly, and anything unsound makes the whole set untrusted
(ManifestError). The report-only parts (``workloads``, ``keys``, ``compile_times``: what a build
compiled and why a graph missed) are kept as written; only the tools parse them
(protocol/workloads.py, tools/why.py). The manifest is built once and frozen; docs/reference/manifest.md is
generated from these fields (``documentation``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from hatch_precompile.errors import ManifestError
from hatch_precompile.protocol import fields
from hatch_precompile.protocol.fields import anything, field, mapping, mapping_or_none, records
from hatch_precompile.protocol.names import (
    CPU_TARGETS,
    FILE_KINDS,
    INDUCTOR_DIR,
    SHA256,
    file_kind,
    is_safe_relpath,
    step_files,
)

# 2: the environment key has python_abi; sets of artifacts share content-addressed blobs.
# 3: the compiler left the exact key (it stands in, by family); the kernels' CPU features, the
# system libraries they need and the Inductor settings they were built under are recorded.
FORMAT = 3

# Inductor settings a set may ask load() to apply (a manifest may never set anything else).
SETTINGS = {"cpp.dynamic_threads": bool}
_FEATURE = re.compile(r"[A-Za-z0-9_.:?-]{1,64}")
_SONAME = re.compile(r"[A-Za-z0-9_.+-]{1,128}")


@dataclasses.dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class Kernel:
    """A CPU kernel whose name depends on install paths (see run/caches/relocate.py)."""

    key: str  # its name in the build's cache dir
    command: str  # its hashed compiler command line, install paths as placeholders
    source: str  # the manifest path of its .cpp
    files: tuple[str, ...]  # the manifest paths named after ``key``


# -- checks ------------------------------------------------------------------------------------------


def _format(value: Any) -> int:
    if value != FORMAT:
        older = (" (written by an older hatch-precompile: rebuild the wheel)"
                 if isinstance(value, int) and 0 < value < FORMAT else "")
        raise ManifestError(f"manifest format {value!r} is not the supported format {FORMAT}{older}")
    return value


def _package(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _env(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError("manifest has no environment key")
    return dict(value)


def _files(value: Any) -> dict[str, FileEntry]:
    if not isinstance(value, dict):
        raise ManifestError("manifest has no file list")
    files = {}
    for path, entry in value.items():
        if not is_safe_relpath(path):
            raise ManifestError(f"manifest names a path outside its directory: {path!r}")
        if not (isinstance(entry, dict) and isinstance(entry.get("size"), int) and isinstance(entry.get("sha256"), str)):
            raise ManifestError(f"manifest entry for {path!r} lacks size or sha256")
        if not SHA256.fullmatch(entry["sha256"]):
            raise ManifestError(f"manifest entry for {path!r} has no valid sha256")
        files[path] = FileEntry(entry["size"], entry["sha256"])
    return files


def _kernels(value: Any) -> list[Kernel]:
    kernels = []
    for kernel in value if isinstance(value, list) else [value]:
        if not (isinstance(kernel, dict) and isinstance(kernel.get("key"), str) and isinstance(kernel.get("command"), str)
                and isinstance(kernel.get("source"), str) and isinstance(kernel.get("files"), list)
                and all(isinstance(f, str) for f in kernel["files"])):
            raise ManifestError(f"manifest kernel entry is malformed: {kernel!r}")
        kernels.append(Kernel(kernel["key"], kernel["command"], kernel["source"], tuple(kernel["files"])))
    return kernels


def _names_to_paths(what: str) -> Any:
    def check(value: Any) -> dict[str, str]:
        if not (isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
            raise ManifestError(f"manifest names a {what} that is not in its file list")
        return dict(value)

    return check


def _cpu_target(value: Any) -> str:
    if value not in CPU_TARGETS:
        raise ManifestError(f"manifest has an unknown cpu_target {value!r}")
    return value


def _features(value: Any) -> list[str]:
    if not (isinstance(value, list) and all(isinstance(f, str) and _FEATURE.fullmatch(f) for f in value)):
        raise ManifestError("manifest cpu_features is not a list of feature names")
    return list(value)


def _libraries(value: Any) -> dict[str, dict[str, str]]:
    if not (isinstance(value, dict) and all(
        isinstance(name, str) and _SONAME.fullmatch(name) and isinstance(versions, dict)
        and all(isinstance(v, str) and isinstance(sym, str) for v, sym in versions.items())
        for name, versions in value.items()
    )):
        raise ManifestError("manifest libraries is not a map of library names to symbol versions")
    return {k: dict(v) for k, v in value.items()}


def _compiler(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError("manifest compiler is not a map")
    return dict(value)


def _settings(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError("manifest settings is not a map")
    for name, setting in value.items():
        if name not in SETTINGS or not isinstance(setting, SETTINGS[name]):
            raise ManifestError(f"manifest asks for the Inductor setting {name}={setting!r}, which load() never applies")
    return dict(value)


def _probes(value: Any) -> dict[str, list[str]]:
    if not (isinstance(value, dict) and all(
        isinstance(flags, str) and isinstance(features, list)
        and all(isinstance(f, str) and _FEATURE.fullmatch(f) for f in features)
        for flags, features in value.items()
    )):
        raise ManifestError("manifest probes is not a map of arch flags to CPU features")
    return {k: list(v) for k, v in value.items()}


def _visible(value: Any) -> dict[str, Any] | None:
    """load() compares each setting it can see with these; a part that is not a map is none."""
    return mapping_or_none(value)


def _steps(value: Any) -> dict[str, dict[str, Any]]:
    if not (isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, dict) for k, v in value.items())):
        raise ManifestError("manifest names a step whose contract is not in its file list")
    return {k: dict(v) for k, v in value.items()}


# -- the manifest ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Manifest:
    """``manifest.json``: what a set of artifacts is, where it is valid, and what made it."""

    package: str = field(_package, "the import package that calls `load()`", required=True)
    env: dict[str, Any] = field(_env, "the environment key (`ENV_FIELDS`): every field must equal the loading "
                                      "process's", required=True)
    files: dict[str, FileEntry] = field(_files, "every file of the set by its logical path: size and sha256 (the "
                                                "bytes are `blobs/<sha256>`); nothing unlisted is ever installed",
                                        required=True)
    kernels: list[Kernel] = field(_kernels, "CPU kernels named after install paths: their hashed command line, "
                                            "renamed for where torch and the compiler are (run/caches/relocate.py)",
                                  factory=list)
    torchscript: dict[str, str] = field(_names_to_paths("TorchScript module"),
                                        "TorchScript module name -> its file (`save_torchscript`)", factory=dict)
    megacache: dict[str, Any] | None = field(mapping_or_none, "the Mega-Cache file and what torch said it holds",
                                             default=None)
    steps: dict[str, dict[str, Any]] = field(_steps, "each step `save_step` shipped: its route, the torch that "
                                                     "captured it and those it was proven on, an exported step's "
                                                     "dims and ranges and its proofs (torch, device, CUDA: where "
                                                     "a process of its own opened and ran the package)",
                                        factory=dict)
    cpu_target: str | None = field(_cpu_target, '`"portable"` or `"native"`: which CPUs the kernels were built for',
                                   default=None)
    cpu_features: list[str] = field(_features, "CPU features (as `/proc/cpuinfo` names them) the kernels may "
                                               "execute: the CPU must have every one", factory=list)
    libraries: dict[str, dict[str, str]] = field(_libraries, "per system library the kernels link against, one "
                                                             "symbol per symbol version they need", factory=dict)
    compiler: dict[str, Any] | None = field(_compiler, "the build's compiler: Inductor's `cpp.cxx`, the command, "
                                                       "its family and `--version`; any of the family stands in",
                                            default=None)
    settings: dict[str, Any] = field(_settings, "Inductor settings the graphs were compiled under, which `load()` "
                                                "applies (only `cpp.dynamic_threads`)", factory=dict)
    probes: dict[str, list[str]] = field(_probes, "Inductor's ISA probes that passed at build: arch flags -> the CPU "
                                                  "features they enable", factory=dict)
    visible: dict[str, Any] | None = field(_visible, "the process settings the graphs were compiled under that "
                                                            "`load()` can see (run/caches/foreseen_misses.py)", default=None)
    platform: dict[str, Any] | None = field(mapping_or_none, "the most compatible manylinux tag the kernels allow, "
                                                             "and why", default=None)
    generator: str | None = field(anything, "the hatch-precompile that wrote it", default=None)
    python_full: str | None = field(anything, "the build's Python version", default=None)
    inductor_vec_isa: str | None = field(anything, "the vector ISA Inductor picked at build", default=None)
    timings: dict[str, float] = field(mapping, "seconds: importing torch, the whole build of the set", factory=dict)
    cache_files_copied: int | None = field(anything, "files of the Inductor cache dir in the set", default=None)
    warmed: dict[str, Any] | None = field(mapping_or_none, "set by `hatch-precompile warm`: when, for which version "
                                                           "of the package", default=None)
    workloads: list[dict[str, Any]] = field(records, "each workload: its seconds, counters, graphs compiled, graph "
                                                     "breaks, recompiles, float64 nodes (protocol/workloads.py)",
                                            factory=list, report_only=True)
    compile_times: str | None = field(anything, "torch's compile time by phase, all workloads", default=None,
                                      report_only=True)
    keys: dict[str, Any] | None = field(mapping_or_none, "what each of torch's cache keys was made of (`why` says "
                                                         "which field differs)", default=None, report_only=True)
    served: dict[str, Any] | None = field(mapping_or_none, "the package's compiled functions proven served untraced "
                                                           "in a fresh process at build: how many of how many, and "
                                                           "why each other one is not (builder/served/served_proof.py)",
                                          default=None, report_only=True)
    format: int = field(_format, f"the manifest's format ({FORMAT}); any other is refused", default=FORMAT,
                        required=True)

    @classmethod
    def parse(cls, raw: bytes) -> "Manifest":
        """The manifest in ``raw``, checked: raises ManifestError if anything in it is unusable."""
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ManifestError(f"manifest.json does not parse: {exc}") from None
        return cls.from_data(data)

    @classmethod
    def from_data(cls, data: Any) -> "Manifest":
        """The manifest from its JSON object, checked (ManifestError)."""
        if not isinstance(data, dict):
            raise ManifestError("manifest.json is not an object")
        _format(data.get("format"))  # first: another format's fields mean other things
        manifest = fields.parse(cls, data)
        manifest.check_references()
        return manifest

    @classmethod
    def as_written(cls, data: dict[str, Any]) -> "Manifest":
        """What can be read of a manifest load() refuses, for a report: each unsound field left at
        its default."""
        return fields.parse(cls, data, lenient={"package": "", "env": {}, "files": {}, "format": data.get("format")})

    def check_references(self) -> None:
        """Every path the manifest names beside ``files`` is one of its files."""
        for kernel in self.kernels:
            if kernel.source not in self.files or not all(f in self.files for f in kernel.files):
                raise ManifestError(f"manifest kernel entry is malformed: {kernel!r}")
        if not all(p in self.files for p in self.torchscript.values()):
            raise ManifestError("manifest names a TorchScript module that is not in its file list")
        if not all(step_files(name)["json"] in self.files for name in self.steps):
            raise ManifestError("manifest names a step whose contract is not in its file list")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["kernels"] = [dict(k, files=list(k["files"])) for k in data["kernels"]]
        return data

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"

    def bytes_by_kind(self) -> dict[str, int]:
        sizes = dict.fromkeys(FILE_KINDS, 0)
        for path, entry in self.files.items():
            sizes[file_kind(path)] += entry.size
        return sizes

    def count(self, kind: str) -> int:
        return sum(file_kind(path) == kind for path in self.files)

    @property
    def graph_entries(self) -> int:
        """AOTAutograd entries: one per compiled graph (forward and backward together)."""
        prefix = f"{INDUCTOR_DIR}/aotautograd/"
        return len({p[len(prefix):].split("/", 1)[0] for p in self.files if p.startswith(prefix)})


def validate(data: Any) -> None:
    """Raise ManifestError unless ``data`` is a manifest whose every load-relevant part is sound."""
    Manifest.from_data(data)


def documentation() -> str:
    """docs/reference/manifest.md's table of the manifest's fields, from the dataclass."""
    return fields.documentation(Manifest, "Manifest fields")
