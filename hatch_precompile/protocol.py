"""The contract between the build, run and tools sides: names, the environment key, the manifest.

Every side imports this module and nothing imports the other sides' internals through it. It
is on ``load()``'s path, so it uses the standard library only and imports nothing heavy.

Layout of ``<package>/_precompiled/`` in a wheel (or of a ``hatch-precompile warm`` entry)::

    sets/<set>/manifest.json   one artifact set per environment key (a CPU capability, a machine):
                               the Manifest below, listing the set's files by their logical path:
                                 megacache.bin          torch.compiler.save_cache_artifacts() bytes
                                 inductor/...           the Inductor cache dir (FX graph, AOTAutograd, kernels)
                                 torchscript/<name>.pt  modules recorded with save_torchscript()
                                 steps/<name>.py|.cache|.json  steps captured with save_step()
    blobs/<sha256>             every file's bytes, stored once however many sets list them

and in every wheel's ``.dist-info/extra_metadata/hatch-precompile.json``, the Declaration.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

# -- names ---------------------------------------------------------------------------------------

DIRNAME = "_precompiled"
SETS_DIR = "sets"
BLOBS_DIR = "blobs"
MANIFEST_FILE = "manifest.json"
INDUCTOR_DIR = "inductor"
MEGACACHE_FILE = "megacache.bin"
TORCHSCRIPT_DIR = "torchscript"
STEPS_DIR = "steps"
DECLARATION_FILE = "hatch-precompile.json"
DECLARATION_PATH = f"extra_metadata/{DECLARATION_FILE}"  # inside a wheel's .dist-info
APP = "hatch-precompile"  # the per-user cache dir's name

# -- environment variables -------------------------------------------------------------------------

GLOBAL_SWITCH = "PRECOMPILE"  # and PRECOMPILE_<NAME> per package (package_switch)
PREFERENCES_VAR = "HATCH_PRECOMPILE_PREFERENCES"
TARGET_VAR = "HATCH_PRECOMPILE_TARGET"
HEARTBEAT_VAR = "HATCH_PRECOMPILE_HEARTBEAT"
NO_PATCHES_VAR = "HATCH_PRECOMPILE_NO_PATCHES"  # torch untouched: run/touchpoints.py
NO_SPEEDUPS_VAR = "HATCH_PRECOMPILE_NO_SPEEDUPS"  # its older name
BUILDING_VAR = "HATCH_PRECOMPILE_BUILDING"  # set in a build's child: load() stays off there
TORCHSCRIPT_DIR_VAR = "HATCH_PRECOMPILE_TORCHSCRIPT_DIR"  # where save_torchscript() writes
STEPS_DIR_VAR = "HATCH_PRECOMPILE_STEPS_DIR"  # where save_step() writes
STEPS_VERIFY_VAR = "HATCH_PRECOMPILE_VERIFY_STEPS"  # set in verify's child: save_step() checks the shipped step
NO_STEPS_VAR = "HATCH_PRECOMPILE_NO_STEPS"  # a build ships no step: save_step() does nothing (faster builds)
PACKAGE_VAR = "HATCH_PRECOMPILE_PACKAGE"  # in a child: the package whose artifacts it builds or checks
CACHE_DIR_VAR = "TORCHINDUCTOR_CACHE_DIR"  # torch's
# Set on build machines, not on users': each changes a torch default that is part of every cache
# key, so a build (and `verify`) runs without them. CI=true (every CI service sets it) turns on
# functorch's error_on_custom_op_aliasing from torch 2.11 on: built with it, every graph misses.
BUILDER_ONLY_VARS = ("CI",)

# -- exit codes --------------------------------------------------------------------------------

EXIT_OK = 0
EXIT_FOUND = 1  # `verify` found a miss, `report` found no artifacts
EXIT_USAGE = 2  # a usage error, a package not installed, a workload that raised
EXIT_WORKLOAD_FAILED = 3  # a build's or verify's child: a workload raised
EXIT_INTERRUPTED = 130

# -- steps -----------------------------------------------------------------------------------------

STEP_CHECKS = ("eager", "compile")  # what save_step() compares the captured step with
ON_FAILURE = ("error", "warn")  # a workload's or a step's failure: fail the build, or warn and go on
# The routes a shipped step runs by: AOTInductor (inference, no compiler at run time) and
# torch.compiler.precompile (training, torch 2.14+); "fallback" is load_step's torch.compile.
STEP_ROUTES = ("aotinductor", "precompiled")


def step_files(name: str) -> dict[str, str]:
    """The logical paths of a step's files in an artifact set (which exist depends on its route):
    its contract (json); precompile's code and cache (py, cache); AOTInductor's package and the
    constants shipped beside it (pt2, constants)."""
    return {part: f"{STEPS_DIR}/{name}.{part}" for part in ("json", "py", "cache", "pt2", "constants")}


# -- workloads -----------------------------------------------------------------------------------

DEFAULT_TIMEOUT = 1800.0
# Where workloads run: "auto" as the build machine is, "cuda" only with a usable GPU, "cpu" with
# the GPUs hidden (CUDA_VISIBLE_DEVICES=""), for CPU machines' artifacts built on a GPU machine.
DEVICES = ("auto", "cpu", "cuda")
DOTTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
WORKLOAD = re.compile(rf"{DOTTED_NAME.pattern}:{DOTTED_NAME.pattern}")  # "package.module:function"


def canonical_name(name: str) -> str:
    """PEP 503 normalisation (``packaging.utils.canonicalize_name``): ``Sample.Pkg`` -> ``sample-pkg``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def package_switch(name: str) -> str:
    """``sample-pkg`` / ``sample_pkg`` / ``Sample.Pkg`` -> ``PRECOMPILE_SAMPLE_PKG``."""
    return f"{GLOBAL_SWITCH}_{canonical_name(name).replace('-', '_').upper()}"


# -- the environment key ---------------------------------------------------------------------------

# Fields compared exactly. Order matters: the first differing field is the one a skip message
# names. ``python_abi`` is the interpreter's SOABI: free-threaded (3.13t) and debug builds have
# another C-API than the default. The C++ compiler is not among them: any compiler of the same
# family stands in for the build's (Manifest.compiler); what the kernels need of the CPU and of
# the system's libraries is checked as a subset (Manifest.cpu_features, Manifest.libraries).
ENV_FIELDS = (
    "python", "python_abi", "torch", "system", "machine", "cpu_capability", "cuda", "triton", "gpu",
    "gpu_capability",
)


def env_id(env: dict[str, Any]) -> str:
    """A short stable name of an environment key (for per-user cache entries and set names)."""
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def set_name(env: dict[str, Any]) -> str:
    """The dir name of an artifact set: readable first (``avx2-...``), unique by its key."""
    capability = re.sub(r"[^a-z0-9]+", "_", str(env.get("cpu_capability") or "cpu").lower())
    return f"{capability}-{env_id(env)[:12]}"


def blob_path(digest: str) -> str:
    """Where the bytes with this sha256 are, relative to ``_precompiled/``."""
    return f"{BLOBS_DIR}/{digest}"


def first_mismatch(built: dict[str, Any], here: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """(field, value at build, value here) of the first differing field, or None."""
    for field in ENV_FIELDS:
        if built.get(field) != here.get(field):
            return field, built.get(field), here.get(field)
    return None


# -- files -----------------------------------------------------------------------------------------


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=@,~-]{0,254}")
# Names Windows gives to devices, in any directory and with any extension.
_WINDOWS_DEVICES = re.compile(r"(con|prn|aux|nul|com[0-9]|lpt[0-9])(\..*)?", re.IGNORECASE)


def is_safe_relpath(path: Any) -> bool:
    """A plain relative POSIX path that stays inside the manifest's directory, on every OS.

    Each component is letters, digits and ``_.+=@,~-`` (no drive letters, backslashes, ``:``
    streams, dot-dirs, hidden names or Windows device names), as Inductor's own file names are.
    """
    if not isinstance(path, str) or not path or len(path) > 1024:
        return False
    return all(
        _COMPONENT.fullmatch(part) and not _WINDOWS_DEVICES.fullmatch(part) for part in path.split("/")
    )


_ARTIFACT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_artifact_name(name: object, what: str) -> None:
    """A name a workload gives an artifact (a TorchScript module, a step): one safe path component."""
    if not isinstance(name, str) or not _ARTIFACT_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"{what} name {name!r} must be letters, digits, '_', '-' or '.' (at most 128)")


FILE_KINDS = ("aotautograd", "fxgraph", "kernel_binary", "other_inductor", "megacache", "torchscript", "step", "other")


def file_kind(path: str) -> str:
    """Which of FILE_KINDS an artifact path is, for reports."""
    if path.startswith(f"{INDUCTOR_DIR}/aotautograd/"):
        return "aotautograd"
    if path.startswith(f"{INDUCTOR_DIR}/fxgraph/"):
        return "fxgraph"
    if path.endswith(".so"):
        return "kernel_binary"
    if path.startswith(f"{INDUCTOR_DIR}/"):
        return "other_inductor"
    if path == MEGACACHE_FILE:
        return "megacache"
    if path.startswith(f"{TORCHSCRIPT_DIR}/"):
        return "torchscript"
    if path.startswith(f"{STEPS_DIR}/"):
        return "step"
    return "other"


# -- the manifest ----------------------------------------------------------------------------------

# 2: the environment key has python_abi; sets of artifacts share content-addressed blobs.
# 3: the compiler left the exact key (it stands in, by family); the kernels' CPU features, the
# system libraries they need and the Inductor settings they were built under are recorded.
FORMAT = 3

# Where kernels may run: "portable" sets are built without -march=native, for every CPU with the
# ISA Inductor picked; "native" ones for CPUs with every feature of the build machine's.
CPU_TARGETS = ("portable", "native")
# Inductor settings a set may ask load() to apply (a manifest may never set anything else).
SETTINGS = {"cpp.dynamic_threads": bool}
_FEATURE = re.compile(r"[A-Za-z0-9_.:?-]{1,64}")
_SONAME = re.compile(r"[A-Za-z0-9_.+-]{1,128}")


class ManifestError(Exception):
    """The manifest cannot be trusted; nothing it names is used."""


@dataclasses.dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class Kernel:
    """A CPU kernel whose name depends on install paths (see run/relocate.py)."""

    key: str  # its name in the build's cache dir
    command: str  # its hashed compiler command line, install paths as placeholders
    source: str  # the manifest path of its .cpp
    files: tuple[str, ...]  # the manifest paths named after ``key``


@dataclasses.dataclass
class Graph:
    """One graph a workload compiled, from torch's compilation metrics."""

    compile_id: str | None = None
    kind: str = "forward"  # or "backward"
    function: str | None = None
    location: str | None = None  # file:line of the compiled function
    seconds: float = 0.0
    inductor_seconds: float | None = None
    ops: int | None = None
    recompile_reason: str | None = None
    fail_reason: str | None = None
    aot_hits: int = 0
    aot_misses: int = 0
    fx_hits: int = 0
    fx_misses: int = 0
    inputs: list[dict[str, Any]] | None = None  # the call it was compiled for: name, shape, dtype, requires_grad
    grad_mode: bool | None = None
    # Dynamo's tracing of this frame thrown away by a restart (a graph break): paid at every start,
    # warm ones too, for the artifacts skip compiling, not tracing.
    restart_seconds: float = 0.0
    restart_reasons: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Workload:
    """What one workload compiled at build time, and what it cost (``report`` shows it)."""

    name: str
    seconds: float = 0.0
    counters: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    graphs: list[Graph] | None = None  # None: not recorded by the version that built it
    graph_breaks: list[dict[str, str]] = dataclasses.field(default_factory=list)
    recompiles: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    float64: list[dict[str, Any]] | None = None  # None: not recorded by the version that built it
    kernels: int | None = None
    cache_bytes: int | None = None

    @property
    def unique_graphs(self) -> int:
        return self.counters.get("stats", {}).get("unique_graphs", 0)

    @classmethod
    def from_dict(cls, w: dict[str, Any]) -> "Workload":
        graphs = w.get("graphs")
        return cls(
            name=w.get("name") or "?", seconds=w.get("seconds") or 0.0, counters=w.get("counters") or {},
            graphs=None if graphs is None else [_known(Graph, g) for g in graphs if isinstance(g, dict)],
            graph_breaks=w.get("graph_breaks") or [], recompiles=w.get("recompiles") or [],
            float64=w.get("float64"), kernels=w.get("kernels"), cache_bytes=w.get("cache_bytes"),
        )


@dataclasses.dataclass
class Manifest:
    """``manifest.json``: what a set of artifacts is, where it is valid, and what made it."""

    package: str
    env: dict[str, Any]  # the environment key (ENV_FIELDS) the artifacts are valid for
    files: dict[str, FileEntry]  # every file, by its path inside the artifact dir
    kernels: list[Kernel] = dataclasses.field(default_factory=list)
    torchscript: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> path
    megacache: dict[str, Any] | None = None  # {"file": ..., "artifacts": {kind: [keys]}}
    workloads: list[Workload] = dataclasses.field(default_factory=list)
    generator: str | None = None
    python_full: str | None = None
    inductor_vec_isa: str | None = None
    compile_times: str | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    cache_files_copied: int | None = None
    warmed: dict[str, Any] | None = None  # set by `hatch-precompile warm`
    # What the kernels need of the machine (see run/machine.py): CPU feature names as Linux's
    # /proc/cpuinfo spells them, each of which the CPU must have; for each system library, one
    # symbol per symbol version the kernels link against.
    cpu_target: str | None = None
    cpu_features: list[str] = dataclasses.field(default_factory=list)
    libraries: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    # The build's compiler: Inductor's `cpp.cxx` setting, the command it resolved to, its family
    # ("gcc", "clang", ...) and --version line. Another compiler of the same family stands in.
    compiler: dict[str, Any] | None = None
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)  # Inductor settings (SETTINGS)
    # Inductor's ISA probes that passed at build: arch flags -> the CPU features they enable
    # (run/speedups.py answers them where this CPU has those features).
    probes: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # The most compatible platform tag the kernels allow ({"tag": "manylinux_2_24_x86_64" or None,
    # "why": ...}); the wheel takes the least compatible of its sets' (build/elf.py).
    platform: dict[str, Any] | None = None
    # What each of torch's cache keys was made of at build (child/keys.py, pack_keys): only tools
    # read it, to say why a graph missed elsewhere (tools/why.py); load() never does.
    keys: dict[str, Any] | None = None
    # The process settings the graphs were compiled under that load() can see (run/visible.py).
    visible: dict[str, Any] | None = None
    # Each step the workloads saved: its route, the torch that captured it and those it was proven
    # on, and for an exported step its inputs' dims and ranges (build/capture.py; report shows it).
    steps: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    format: int = FORMAT

    @classmethod
    def parse(cls, raw: bytes) -> "Manifest":
        """The manifest in ``raw``, checked: raises ManifestError if anything in it is unusable."""
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ManifestError(f"manifest.json does not parse: {exc}") from None
        validate(data)
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Manifest":
        """Build from JSON data; absent optional parts get their defaults (older manifests)."""
        workloads = [Workload.from_dict(w) for w in data.get("workloads") or [] if isinstance(w, dict)]
        return cls(
            package=data.get("package") or "",
            env=dict(data.get("env") or {}),
            files={p: FileEntry(e["size"], e["sha256"]) for p, e in (data.get("files") or {}).items()},
            kernels=[Kernel(k["key"], k["command"], k["source"], tuple(k["files"])) for k in data.get("kernels") or []],
            torchscript=dict(data.get("torchscript") or {}),
            megacache=data.get("megacache"),
            workloads=workloads,
            generator=data.get("generator"),
            python_full=data.get("python_full"),
            inductor_vec_isa=data.get("inductor_vec_isa"),
            compile_times=data.get("compile_times"),
            timings=dict(data.get("timings") or {}),
            cache_files_copied=data.get("cache_files_copied"),
            warmed=data.get("warmed"),
            cpu_target=data.get("cpu_target"),
            cpu_features=list(data.get("cpu_features") or []),
            libraries={k: dict(v) for k, v in (data.get("libraries") or {}).items()},
            compiler=data.get("compiler"),
            settings=dict(data.get("settings") or {}),
            platform=data.get("platform"),
            probes={k: list(v) for k, v in (data.get("probes") or {}).items()},
            keys=data.get("keys") if isinstance(data.get("keys"), dict) else None,
            visible=data.get("visible") if isinstance(data.get("visible"), dict) else None,
            steps={k: dict(v) for k, v in (data.get("steps") or {}).items()},
            format=data.get("format", FORMAT),
        )

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


def pack_keys(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The manifest's ``keys``: fields every entry shares once in ``common``, the rest per entry."""
    if not entries:
        return None
    common = dict(entries[0]["fields"])
    for e in entries[1:]:
        common = {k: v for k, v in common.items() if e["fields"].get(k) == v}
    return {"common": common, "entries": [
        {**e, "fields": {k: v for k, v in e["fields"].items() if k not in common}} for e in entries
    ]}


def unpack_keys(keys: Any) -> list[dict[str, Any]]:
    """Entries with their whole fields, from a manifest's ``keys`` (written by any version: a part
    that is not what we expect is left out, never raised on)."""
    if not isinstance(keys, dict) or not isinstance(keys.get("entries"), list):
        return []
    common = keys.get("common") if isinstance(keys.get("common"), dict) else {}
    out = []
    for e in keys["entries"]:
        if isinstance(e, dict) and isinstance(e.get("fields"), dict):
            out.append({**e, "fields": {**common, **e["fields"]}, "sources": e.get("sources") or {}})
    return out


def _known(kind: type, data: dict[str, Any]) -> Any:
    """``kind(**data)`` keeping only the fields ``kind`` has (a newer writer may add some)."""
    names = {f.name for f in dataclasses.fields(kind)}
    return kind(**{k: v for k, v in data.items() if k in names})


def validate(data: Any) -> None:
    """Raise ManifestError unless ``data`` is a manifest whose every load-relevant part is sound."""
    if not isinstance(data, dict):
        raise ManifestError("manifest.json is not an object")
    if data.get("format") != FORMAT:
        older = (" (written by an older hatch-precompile: rebuild the wheel)"
                 if isinstance(data.get("format"), int) and 0 < data["format"] < FORMAT else "")
        raise ManifestError(f"manifest format {data.get('format')!r} is not the supported format {FORMAT}{older}")
    if not isinstance(data.get("env"), dict):
        raise ManifestError("manifest has no environment key")
    files = data.get("files")
    if not isinstance(files, dict):
        raise ManifestError("manifest has no file list")
    for path, entry in files.items():
        if not is_safe_relpath(path):
            raise ManifestError(f"manifest names a path outside its directory: {path!r}")
        if not (isinstance(entry, dict) and isinstance(entry.get("size"), int) and isinstance(entry.get("sha256"), str)):
            raise ManifestError(f"manifest entry for {path!r} lacks size or sha256")
        if not _SHA256.fullmatch(entry["sha256"]):
            raise ManifestError(f"manifest entry for {path!r} has no valid sha256")
    for kernel in data.get("kernels") or []:
        if not (
            isinstance(kernel, dict)
            and kernel.get("source") in files
            and isinstance(kernel.get("files"), list)
            and all(f in files for f in kernel["files"])
            and isinstance(kernel.get("key"), str)
            and isinstance(kernel.get("command"), str)
        ):
            raise ManifestError(f"manifest kernel entry is malformed: {kernel!r}")
    torchscript = data.get("torchscript") or {}
    if not isinstance(torchscript, dict) or not all(p in files for p in torchscript.values()):
        raise ManifestError("manifest names a TorchScript module that is not in its file list")
    steps = data.get("steps") or {}
    if not isinstance(steps, dict) or not all(
        isinstance(name, str) and isinstance(step, dict) and step_files(name)["json"] in files
        for name, step in steps.items()
    ):
        raise ManifestError("manifest names a step whose contract is not in its file list")
    _validate_machine(data)


def _validate_machine(data: dict[str, Any]) -> None:
    """What the set needs of the machine must be well-formed: it decides whether native code runs."""
    if data.get("cpu_target") not in (None, *CPU_TARGETS):
        raise ManifestError(f"manifest has an unknown cpu_target {data.get('cpu_target')!r}")
    features = data.get("cpu_features", [])
    if not (isinstance(features, list) and all(isinstance(f, str) and _FEATURE.fullmatch(f) for f in features)):
        raise ManifestError("manifest cpu_features is not a list of feature names")
    libraries = data.get("libraries", {})
    if not (isinstance(libraries, dict) and all(
        isinstance(name, str) and _SONAME.fullmatch(name) and isinstance(versions, dict)
        and all(isinstance(v, str) and isinstance(sym, str) for v, sym in versions.items())
        for name, versions in libraries.items()
    )):
        raise ManifestError("manifest libraries is not a map of library names to symbol versions")
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise ManifestError("manifest settings is not a map")
    for name, value in settings.items():
        if name not in SETTINGS or not isinstance(value, SETTINGS[name]):
            raise ManifestError(f"manifest asks for the Inductor setting {name}={value!r}, which load() never applies")
    compiler = data.get("compiler")
    if compiler is not None and not isinstance(compiler, dict):
        raise ManifestError("manifest compiler is not a map")
    probes = data.get("probes", {})
    if not (isinstance(probes, dict) and all(
        isinstance(flags, str) and isinstance(features, list)
        and all(isinstance(f, str) and _FEATURE.fullmatch(f) for f in features)
        for flags, features in probes.items()
    )):
        raise ManifestError("manifest probes is not a map of arch flags to CPU features")


# -- a child process's result ------------------------------------------------------------------

CHILD_FORMAT = 1
# "ok": the job ran; "failed": a workload raised (``failure``); the others: nothing was run, and
# ``detail`` says why: this torch cannot make trustworthy artifacts ("unusable"), this machine
# cannot run the asked CPU capability ("skipped"), has no usable GPU ("no_gpu") or cannot build
# C++ kernels ("cannot_compile").
CHILD_STATUSES = ("ok", "failed", "unusable", "skipped", "no_gpu", "cannot_compile")


class ChildResultError(Exception):
    """A child's result.json is missing, unreadable or of another format."""


@dataclasses.dataclass(frozen=True)
class Failure:
    """A workload that raised, in the child."""

    workload: str
    traceback: str
    missing_module: str | None = None  # the module a failed import did not find
    no_gpu: str | None = None  # why the machine has no usable GPU, when the workload needed one


@dataclasses.dataclass
class ChildResult:
    """``result.json``: what a build's, ``verify``'s or ``snoop``'s child process reports."""

    status: str
    detail: str | None = None
    failure: Failure | None = None
    workloads: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # in order, as measured
    data: dict[str, Any] = dataclasses.field(default_factory=dict)  # the job's own report
    format: int = CHILD_FORMAT

    def dumps(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def parse(cls, text: str) -> "ChildResult":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ChildResultError(f"result.json does not parse: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != CHILD_FORMAT or data.get("status") not in CHILD_STATUSES:
            raise ChildResultError("result.json is not a result of this hatch-precompile")
        failure = data.get("failure")
        return cls(
            status=data["status"], detail=data.get("detail"),
            failure=_known(Failure, failure) if isinstance(failure, dict) else None,
            workloads=list(data.get("workloads") or []), data=dict(data.get("data") or {}),
        )


# -- the declaration -------------------------------------------------------------------------------

DECLARATION_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What the hook's table declared, carried by every wheel (precompiled or not) for ``warm``."""

    package: str
    workloads: tuple[str, ...]
    timeout: float = DEFAULT_TIMEOUT
    device: str = "auto"

    def dumps(self) -> str:
        data = {"format": DECLARATION_FORMAT, "package": self.package, "workloads": list(self.workloads),
                "timeout": self.timeout, "device": self.device}
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def parse(cls, text: str) -> "Declaration | None":
        """The declaration in ``text``, or None when it is not one this version reads."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not (
            isinstance(data, dict)
            and data.get("format") == DECLARATION_FORMAT
            and isinstance(data.get("package"), str)
            and isinstance(data.get("workloads"), list)
            and all(isinstance(w, str) and WORKLOAD.fullmatch(w) for w in data["workloads"])
        ):
            return None
        timeout = data.get("timeout")
        valid = isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0
        device = data.get("device") if data.get("device") in DEVICES else "auto"
        return cls(data["package"], tuple(data["workloads"]), float(timeout) if valid else DEFAULT_TIMEOUT, device)
