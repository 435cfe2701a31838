"""Lay out one run of the workloads as an artifact set of ``_precompiled/``, and read the sets back.

Each file stored under its sha256 in ``blobs/`` (once, however many sets list it), the set's
manifest under ``sets/<name>/``, what its native files need of the system (builder/sets/elf.py), its
kernels as path- and compiler-free templates (run/caches/relocate.py), and what each exported step's
libraries need. No torch here: the files are the child's (workload_run.py ran it), read and copied.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from hatch_precompile import __version__
from hatch_precompile.builder.reporter import Reporter
from hatch_precompile.errors import ElfUnreadable
from hatch_precompile.protocol import (
    BLOBS_DIR,
    C_MODULES_DIR,
    DYNAMO_DIR,
    INDUCTOR_DIR,
    MANIFEST_FILE,
    SETS_DIR,
    STEPS_DIR,
    TORCHSCRIPT_DIR,
    FileEntry,
    Kernel,
    Manifest,
    blob_path,
    is_safe_relpath,
    set_name,
    sha256,
)
from hatch_precompile.protocol import workloads as workload_records
from hatch_precompile.run.caches import relocate

# Not shipped: Inductor's lock files; and Triton's own cache, whose group files hold absolute
# paths (moved, it silently misses) and whose kernels already travel inside the FX-graph
# entries (Inductor's TritonBundler rewrites the paths when it writes them out at a hit).
_SKIP_DIRS = {"locks", "triton"}


def lay_out(target: Path, package: str, result: dict[str, Any], *, cache_dir: Path, out_dir: Path, started: float,
            reporter: Reporter) -> Manifest | None:
    """One run's files (Inductor's ``cache_dir``, the child's ``out_dir``, its ``result``) laid out
    as ``target/sets/<name>``; None if the run compiled and saved nothing. ``started``: when the run
    began (``time.perf_counter()``), for the set's total seconds."""
    if not any((cache_dir / kind).is_dir() for kind in ("aotautograd", "fxgraph")) and not (
        out_dir / TORCHSCRIPT_DIR
    ).is_dir() and not (out_dir / STEPS_DIR).is_dir():
        return None
    libraries, unreadable = _native_needs(cache_dir)
    # An exported step's model library needs more of the system (a newer libstdc++, say): checked
    # where it loads, so that a system without falls back for that step, not for the whole set.
    _step_libraries(out_dir, reporter)
    steps = _steps(out_dir)
    for path, problem in unreadable.items():  # not shipped: torch compiles that kernel where it is used
        reporter.warning(f"{problem}; {path.name} is not shipped")
        path.unlink()
    files, skipped = _store_files(target, cache_dir, out_dir)
    if skipped:
        reporter.info(f"{skipped} cache file(s) with names load() would not trust are not shipped")
    if result.get("feature_problem"):
        reporter.warning(f"{result['feature_problem']}; load() will not use this set's kernels")
    unknown = [f for f in result.get("cpu_features", []) if f.startswith("?")]
    if unknown and not result.get("feature_problem"):
        reporter.warning(f"the kernels may use CPU features hatch-precompile cannot name ({', '.join(unknown)}); "
                         "load() refuses this set on every machine (cpu-target = \"portable\" avoids them)")
    kernels, unverified = _relocatable_kernels(cache_dir, result["kernel_commands"], result["path_values"])
    if unverified:
        reporter.info(
            f"{unverified} kernel(s) are not relocatable with this torch; they hit "
            "only where torch is installed at the same path as in this build"
        )
    result["total_seconds"] = round(time.perf_counter() - started, 3)
    manifest = _manifest(package, result, files, kernels, steps, libraries)
    set_dir = target / SETS_DIR / set_name(manifest.env)
    set_dir.mkdir(parents=True, exist_ok=True)
    (set_dir / MANIFEST_FILE).write_text(manifest.dumps())
    return manifest


def set_manifests(target: Path) -> list[Manifest]:
    """The manifest of each set laid out in ``target`` (a ``_precompiled`` dir), by set name."""
    return [Manifest.parse(f.read_bytes()) for f in sorted((target / SETS_DIR).glob(f"*/{MANIFEST_FILE}"))]


def stored_bytes(target: Path) -> int:
    """What the blobs of ``target`` take: each once, however many sets list it."""
    return sum(blob.stat().st_size for blob in (target / BLOBS_DIR).iterdir())


def _steps(out_dir: Path) -> dict[str, dict[str, Any]]:
    """What the manifest says of each step the workloads saved (report shows it): its route, the
    torch that captured it and those it was proven on, and an exported step's inputs and ranges."""
    found = {}
    for path in sorted((out_dir / STEPS_DIR).glob("*.json")):
        record = json.loads(path.read_text())
        name = path.name.removesuffix(".json")
        summary = {"route": record.get("route", "precompile"), "torch": record.get("torch"),
                   "proven": record.get("proven") or []}
        if "proofs" in record:  # an exported package: where a process of its own opened and ran it
            summary["proofs"] = record["proofs"]
        export = record.get("export")
        if isinstance(export, dict):
            # What its contract (steps/<name>.json) says in full, the CPU features and libraries too.
            summary.update(inputs=[leaf.get("dims", leaf.get("value")) for leaf in export["leaves"]],
                           ranges=export["ranges"])
        found[name] = summary
    return found


def _manifest(package: str, result: dict[str, Any], files: dict[str, FileEntry], kernels: list[Kernel],
              steps: dict[str, dict[str, Any]], libraries: dict[str, dict[str, str]]) -> Manifest:
    """The manifest of one set, from what the child reported."""
    return Manifest(
        package=package,
        env=result["env"],
        files=files,
        kernels=kernels,
        torchscript={p.rsplit("/", 1)[1].removesuffix(".pt"): p for p in files if p.startswith(f"{TORCHSCRIPT_DIR}/")},
        workloads=[workload_records.normalize(w) for w in result["workloads"]],
        generator=f"hatch-precompile {__version__}",
        python_full=result["python_full"],
        inductor_vec_isa=result["inductor_vec_isa"],
        compile_times=result["compile_times"],
        timings={"torch_import_seconds": result["import_seconds"], "total_seconds": result["total_seconds"]},
        cache_files_copied=sum(p.startswith(f"{INDUCTOR_DIR}/") for p in files),
        cpu_target=result.get("cpu_target"),
        cpu_features=result.get("cpu_features") or [],
        compiler=result.get("compiler"),
        settings=result.get("settings") or {},
        probes=result.get("probes") or {},
        visible=result.get("visible"),
        keys=workload_records.pack_keys([e for w in result["workloads"] for e in w.get("keys") or []]),
        steps=steps,
        libraries=libraries,
        platform=_platform(libraries, result),
        served=result.get("served"),
    )


def _platform(libraries: dict[str, dict[str, str]], result: dict[str, Any]) -> dict[str, Any]:
    """The manylinux tag the set's kernels allow (builder/sets/elf.py); None off Linux."""
    if not sys.platform.startswith("linux"):
        return {"tag": None, "why": f"no manylinux tag on {sys.platform}"}
    from hatch_precompile.builder.sets import elf

    tag, why = elf.platform_tag(libraries, set(result.get("torch_libraries") or []), platform.machine())
    return {"tag": tag, "why": why}


def _step_libraries(out_dir: Path, reporter: Reporter) -> None:
    """Write into each exported step's contract what its package's native libraries need of the
    system, read as the kernels' are (_native_needs). Here, not in the child: pyelftools is this
    build's, not the target environment's."""
    import tempfile
    import zipfile

    for contract in sorted((out_dir / STEPS_DIR).glob("*.json")):
        record = json.loads(contract.read_text())
        package = contract.with_suffix(".pt2")
        if not isinstance(record.get("export"), dict) or not package.is_file():
            continue
        with zipfile.ZipFile(package) as archive, tempfile.TemporaryDirectory() as tmp:
            libraries = [m for m in archive.namelist() if m.endswith(".so")]
            archive.extractall(tmp, members=libraries)
            needed, unreadable = _native_needs(Path(tmp))
        for path, problem in unreadable.items():  # a library no machine has: load_step() falls back, saying so
            reporter.warning(f"step {contract.stem!r}: {problem}")
            needed[f"?unreadable {path.name}"] = {}
        record["export"]["libraries"] = needed
        contract.write_text(json.dumps(record, indent=1))


def _native_needs(cache_dir: Path) -> tuple[dict[str, dict[str, str]], dict[Path, str]]:
    """What the run's native files need of the system (builder/sets/elf.py), and those that cannot be read."""
    from hatch_precompile.builder.sets import elf

    libraries: dict[str, dict[str, str]] = {}
    unreadable = {}
    for path in sorted(cache_dir.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.relative_to(cache_dir).parts[0] in _SKIP_DIRS:
            continue
        if elf.is_elf(path):
            try:
                elf.merge(libraries, elf.needs(path))
            except ElfUnreadable as exc:
                unreadable[path] = f"cannot read what {exc} needs of the system"
    return libraries, unreadable


def _store_files(target: Path, cache_dir: Path, out_dir: Path) -> tuple[dict[str, FileEntry], int]:
    """Every file of one run as blobs of ``target``: {logical path: entry}, and how many were left out."""
    sources = {}
    for path in sorted(cache_dir.rglob("*")):
        rel = path.relative_to(cache_dir)
        if rel.parts[0] in _SKIP_DIRS or path.name.endswith(".tmp") or path.is_symlink() or not path.is_file():
            continue
        sources[f"{INDUCTOR_DIR}/{rel.as_posix()}"] = path
    for path in sorted((out_dir / TORCHSCRIPT_DIR).glob("*.pt")):
        sources[f"{TORCHSCRIPT_DIR}/{path.name}"] = path
    for path in sorted((out_dir / STEPS_DIR).glob("*.*")):
        sources[f"{STEPS_DIR}/{path.name}"] = path
    for path in sorted((out_dir / C_MODULES_DIR).glob("*.so")):
        sources[f"{C_MODULES_DIR}/{path.name}"] = path
    for path in sorted((out_dir / DYNAMO_DIR).glob("*")):  # the second pass's (builder/served/dynamo_pass.py)
        sources[f"{DYNAMO_DIR}/{path.name}"] = path
    files, skipped = {}, 0
    for logical, path in sources.items():
        if not is_safe_relpath(logical):
            skipped += 1
            continue
        data = path.read_bytes()
        entry = FileEntry(len(data), sha256(data))
        blob = target / blob_path(entry.sha256)
        if not blob.exists():  # the same bytes in another set are stored once
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
        files[logical] = entry
    return files, skipped


def _relocatable_kernels(
    cache_dir: Path, commands: dict[str, list[str]], values: dict[str, str]
) -> tuple[list[Kernel], int]:
    """Kernels whose key our mirror of Inductor's hash reproduces (see run/caches/relocate.py)."""
    entries, unverified = [], 0
    for key, (extension, command) in sorted(commands.items()):
        source = cache_dir / relocate.cache_relpath(key, f".{extension}")
        binary = cache_dir / relocate.cache_relpath(key, f".{extension.removesuffix('cpp')}so")
        if not (source.is_file() and binary.is_file()):
            continue
        template = relocate.to_template(command, values)
        if relocate.code_key(source.read_text(), relocate.render(template, values)) != key:
            unverified += 1
            continue
        group = sorted(source.parent.glob(key + ".*"))
        entries.append(Kernel(
            key=key,
            command=template,
            source=f"{INDUCTOR_DIR}/{source.relative_to(cache_dir).as_posix()}",
            files=tuple(f"{INDUCTOR_DIR}/{p.relative_to(cache_dir).as_posix()}" for p in group),
        ))
    return entries, unverified
