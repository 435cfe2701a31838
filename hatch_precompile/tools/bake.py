"""``hatch-precompile bake``: precompile a wheel that any build backend made, after the build.

A wheel post-processor, as ``auditwheel repair`` and ``delocate-wheel`` are: it takes a built wheel
(setuptools, scikit-build-core, meson-python, poetry-core, flit, maturin, or hatchling without the
hook), unpacks it privately, puts it first on the ``sys.path`` of an interpreter that has the torch
to bake for (nothing is installed there), runs the declared workload in a child exactly as a build
does (builder/workload_run.py), and writes a new wheel: every file of the input byte for byte (checked),
plus the artifact set under ``<package>/_precompiled/``, the declaration in ``.dist-info``, the
platform tag the kernels allow (builder/sets/elf.py, as the hook gives it) and a new ``RECORD``. Baking a
precompiled wheel adds a set, as ``merge`` would. The input wheel is never written to.

The workload is declared, first found wins: ``--workload`` (and ``--package``); the
``[tool.hatch-precompile]`` table of the project's ``pyproject.toml`` (``--project`` gives its
dir or sdist; the options of the hook's table); the declaration a hook-built wheel carries.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import tomllib

from hatch_precompile.builder import options as options_module
from hatch_precompile.errors import BakeError, ManifestError, WheelError
from hatch_precompile.protocol import DECLARATION_FILE, DIRNAME, MANIFEST_FILE, SETS_DIR, Declaration, Manifest
from hatch_precompile.run import variables
from hatch_precompile.tools import wheelfile

TABLE = "tool.hatch-precompile"


@dataclass(frozen=True)
class Plan:
    """What to run for one wheel, and where that was declared (for the log)."""

    package: str
    workloads: tuple[str, ...]
    timeout: float
    device: str
    cpu_target: str
    capabilities: tuple[str, ...]
    source: str
    torch_trace: Path | None = None  # the table's `torch-trace`, or the variable's (builder/settings.py)
    dynamo_cache: bool = True  # the table's `dynamo-cache`; a wheel's declaration: the default


def bake(wheel: Path, out_dir: Path, *, python: str, say: Callable[[str], None], workloads: tuple[str, ...] = (),
         package: str | None = None, project: Path | None = None, timeout: float | None = None,
         device: str | None = None, cpu_target: str | None = None, capabilities: tuple[str, ...] = ()) -> Path:
    """Write ``wheel`` baked into ``out_dir``; the new wheel's path. Raises BakeError."""
    try:
        file_name = wheelfile.wheel_name(wheel)
    except WheelError as exc:
        raise BakeError(str(exc)) from None
    from hatch_precompile.builder.sets import elf

    elf.require_publishing_tools()  # before the workload runs; the command line names the command
    contents = wheelfile.read_wheel(wheel)
    record = wheelfile.record_name(contents, wheel)
    dist_info = record.rsplit("/", 1)[0]
    plan = declaration(contents, dist_info, wheel, workloads, package, project)
    plan = Plan(plan.package, plan.workloads, timeout or plan.timeout, device or plan.device,
                cpu_target or plan.cpu_target, capabilities or plan.capabilities, plan.source, plan.torch_trace,
                plan.dynamo_cache)
    root = plan.package.replace(".", "/")
    if not any(name.startswith(f"{root}/") for name in contents):
        raise BakeError(f"{wheel.name} has no package {plan.package!r} (from {plan.source}): give --package")
    _check_torch(contents, dist_info, wheel, python)
    say(f"bake: {wheel.name}: {', '.join(plan.workloads)} ({plan.source}) with {python}")
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-bake-") as tmp:
        artifacts = _run(wheel, Path(tmp), plan, python, say)
        baked = _with_artifacts(contents, record, dist_info, artifacts, plan, wheel)
    tag = _tag(baked, wheel, dist_info)
    baked[f"{dist_info}/WHEEL"] = wheelfile.with_tag(contents[f"{dist_info}/WHEEL"], tag)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / file_name.with_tag(tag)
    if target.resolve() == wheel.resolve():
        raise BakeError(f"-o {out_dir} would overwrite the input {wheel}: give another directory")
    modes = wheelfile.read_modes(wheel)
    wheelfile.write_wheel(target, contents, baked, record, modes)
    _check_written(target, contents, modes, record, dist_info)
    sets = sorted({n.split(f"/{SETS_DIR}/", 1)[1].split("/", 1)[0] for n in baked if f"/{DIRNAME}/{SETS_DIR}/" in n})
    say(f"bake: wrote {target} ({target.stat().st_size / 1e6:.2f} MB; tag {tag}; artifact set(s) {', '.join(sets)})")
    return target


# -- the declaration -------------------------------------------------------------------------------


def declaration(contents: dict[str, bytes], dist_info: str, wheel: Path, workloads: tuple[str, ...],
                package: str | None, project: Path | None) -> Plan:
    """What to run: the command line's, the project's table, or the wheel's own declaration."""
    defaults = options_module.Options()
    if workloads:
        opts = options_module.parse({"workload": list(workloads), **({"package": package} if package else {})},
                                    "precompile")
        return Plan(opts.import_package or "", opts.workloads, opts.timeout, opts.device, opts.cpu_target,
                    opts.cpu_capabilities, "--workload")
    if project is None and _here_declares(contents, dist_info, wheel):
        project = Path(".")
    if project is not None:
        from hatch_precompile.builder import settings

        opts, where = _table(project)
        return Plan(package or opts.import_package or "", opts.workloads, opts.timeout, opts.device,
                    opts.cpu_target, opts.cpu_capabilities, f"[{TABLE}] of {where}",
                    settings.torch_trace(opts, project if project.is_dir() else project.parent), opts.dynamo_cache)
    declared = f"{dist_info}/extra_metadata/{DECLARATION_FILE}"
    found = options_module.read_declaration(contents.get(declared, b"").decode("utf-8", "replace"),
                                            f"{wheel.name}'s {declared}")
    if found is not None and found.workloads:
        return Plan(package or found.package, found.workloads, found.timeout, found.device, defaults.cpu_target,
                    (), f"the declaration in {wheel.name}")
    raise BakeError(
        f"{wheel.name} declares no workload: give --workload MODULE:FUNCTION, or --project with a "
        f'[{TABLE}] table (workload = "mypkg.precompile:workload") in its pyproject.toml'
    )


def _here_declares(contents: dict[str, bytes], dist_info: str, wheel: Path) -> bool:
    """Whether ``./pyproject.toml`` (bake run in a project's dir, as cibuildwheel's repair step and a
    shell are) declares the workload for this wheel: it has the table, and its project is the wheel's.
    A table of another project is refused, with both names, rather than run against the wheel."""
    from packaging.utils import canonicalize_name

    try:
        data = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    if not isinstance(data.get("tool", {}).get("hatch-precompile"), dict):
        return False
    metadata = email.parser.Parser().parsestr(contents.get(f"{dist_info}/METADATA", b"").decode("utf-8", "replace"))
    mine, theirs = str(data.get("project", {}).get("name") or ""), str(metadata.get("Name") or "")
    if canonicalize_name(mine) != canonicalize_name(theirs):
        raise BakeError(f"./pyproject.toml's [{TABLE}] is for project {mine or '(unnamed)'!r}, and {wheel.name} is "
                        f"{theirs!r}'s: give --project DIR (or --workload) for this wheel")
    return True


def _table(project: Path) -> tuple[options_module.Options, str]:
    """``[tool.hatch-precompile]`` of a project dir's or an sdist's ``pyproject.toml``, and where."""
    where = "./pyproject.toml" if project == Path(".") else f"{project}"
    try:
        if project.is_dir():
            text = (project / "pyproject.toml").read_bytes()
        else:
            with tarfile.open(project) as sdist:
                member = next((m for m in sdist.getmembers() if m.name.count("/") == 1
                               and m.name.endswith("/pyproject.toml")), None)
                if member is None:
                    raise BakeError(f"--project {project}: the sdist has no pyproject.toml")
                text = sdist.extractfile(member).read()  # type: ignore[union-attr]
                where = f"{project}!{member.name}"
        data = tomllib.loads(text.decode("utf-8"))
    except (OSError, tarfile.TarError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BakeError(f"--project {project}: cannot read its pyproject.toml: {exc}") from None
    table = data.get("tool", {}).get("hatch-precompile")
    if not isinstance(table, dict) or "workload" not in table:
        raise BakeError(f"{where} has no [{TABLE}] table with a workload "
                        '(workload = "mypkg.precompile:workload")')
    return options_module.parse(table, "precompile", where=f"[{TABLE}] of {where}"), where


# -- torch ------------------------------------------------------------------------------------------


def _check_torch(contents: dict[str, bytes], dist_info: str, wheel: Path, python: str) -> None:
    """The baking interpreter must have a torch, and one the wheel accepts."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    from hatch_precompile.builder import target_environment

    found = target_environment.probe(python, variables.as_on_users_machines(os.environ)[0])
    if found is None or not found.torch:
        raise BakeError(f"{python} {'cannot run' if found is None else 'has no torch'}: bake runs the workload "
                        "with an interpreter that has the torch to bake for (--python)")
    metadata = email.parser.Parser().parsestr(contents.get(f"{dist_info}/METADATA", b"").decode("utf-8", "replace"))
    for raw in metadata.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(raw)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) != "torch":
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            version = Version(found.torch.split("+", 1)[0])
        except InvalidVersion:
            return
        if not requirement.specifier.contains(version, prereleases=True):
            raise BakeError(f"{wheel.name} requires {raw}, and {python} has torch {found.torch}: bake with an "
                            "interpreter that has a torch the wheel accepts (--python)")


# -- running the workload ---------------------------------------------------------------------------


def _run(wheel: Path, tmp: Path, plan: Plan, python: str, say: Callable[[str], None]) -> Path:
    from hatch_precompile.builder import capture_outcome
    from hatch_precompile.builder.reporter import Reporter
    from hatch_precompile.builder.workload_run import capture

    site = tmp / "site"
    wheelfile.unpack(wheel, site)  # its modes kept: a workload may run a script the package ships
    paths = [str(site)] + [str(p) for p in sorted(site.glob("*.data/p*lib"))]  # purelib, platlib
    env, removed = variables.as_on_users_machines(os.environ)
    if removed:
        say(f"bake: the workloads run without {', '.join(removed)}, as on users' machines")
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    outcome = capture_outcome.outcome_of(
        lambda: capture(root=None, work_dir=tmp / "work", package=plan.package, workloads=list(plan.workloads),
                        timeout=plan.timeout, reporter=Reporter(say, say), python=python, environ=env,
                        device=plan.device, cpu_target=plan.cpu_target, capabilities=plan.capabilities,
                        trace=plan.torch_trace, dynamo_cache=plan.dynamo_cache, users_torch=True),
        plan.workloads,
        hints=lambda failure: [f"bake: install {failure.missing_module!r} into the environment of {python}: bake puts "
                               "only the wheel itself on its path"] if failure.missing_module else [],
    )
    if outcome.artifacts is None:
        raise BakeError(f"{wheel.name}: {outcome.why}")
    keep = tmp / "artifacts"
    shutil.move(str(outcome.artifacts), keep)
    return keep


# -- the new wheel ----------------------------------------------------------------------------------


def _with_artifacts(contents: dict[str, bytes], record: str, dist_info: str, artifacts: Path, plan: Plan,
                    wheel: Path) -> dict[str, bytes]:
    baked = {n: data for n, data in contents.items() if n != record}
    prefix = f"{plan.package.replace('.', '/')}/{DIRNAME}"
    for path in sorted(p for p in artifacts.rglob("*") if p.is_file()):
        name = f"{prefix}/{path.relative_to(artifacts).as_posix()}"
        data = path.read_bytes()
        if name in baked and baked[name] != data:
            raise BakeError(f"{wheel.name} already has {name}, with other contents: it was baked on a machine "
                            "like this one before (bake each kind of machine once, then merge)")
        baked[name] = data
    declared = f"{dist_info}/extra_metadata/{DECLARATION_FILE}"
    baked.setdefault(declared, Declaration(plan.package, plan.workloads, plan.timeout, plan.device).dumps().encode())
    return baked


def _tag(baked: dict[str, bytes], wheel: Path, dist_info: str) -> str:
    """``cp311-cp311-manylinux_2_24_x86_64``: the sets' Python, and the least compatible platform of
    the input wheel's and the kernels' (builder/sets/elf.py), as the hook tags a precompiled wheel."""
    from hatch_precompile.builder.sets import elf

    manifests = []
    for name, data in sorted(baked.items()):
        if f"/{DIRNAME}/{SETS_DIR}/" in f"/{name}" and name.endswith(f"/{MANIFEST_FILE}"):
            try:
                manifests.append(Manifest.parse(data))
            except ManifestError as exc:
                raise BakeError(f"{wheel.name}: {name}: {exc}") from None
    pythons = {(m.env.get("python"), m.env.get("python_abi")) for m in manifests}
    if len(pythons) != 1:
        raise BakeError(f"{wheel.name}: its artifact sets are for several Pythons ({sorted(map(str, pythons))})")
    python, abi = pythons.pop()
    interpreter = "cp" + str(python).replace(".", "")
    abi_tag = interpreter + ("t" if abi and f"{interpreter[2:]}t" in abi else "")
    kernels, _ = elf.wheel_platform([m.platform for m in manifests])
    inputs = wheelfile.platforms(baked[f"{dist_info}/WHEEL"])
    platforms = [p for p in [*inputs, kernels] if p and p != "any"]
    if not platforms:
        import sysconfig

        platforms = [sysconfig.get_platform().replace("-", "_").replace(".", "_")]
    return f"{interpreter}-{abi_tag}-{wheelfile.least_compatible(platforms)}"


def _check_written(target: Path, original: dict[str, bytes], modes: dict[str, int], record: str,
                   dist_info: str) -> None:
    """Every input file but RECORD and WHEEL is in the new wheel byte for byte, with its mode, and
    RECORD is right."""
    written, written_modes = wheelfile.read_wheel(target), wheelfile.read_modes(target)
    for name, data in original.items():
        if name not in (record, f"{dist_info}/WHEEL") and written.get(name) != data:
            raise BakeError(f"{target}: {name} is not the input's byte for byte (a bug: please report it)")
        if written_modes.get(name) != modes.get(name):
            raise BakeError(f"{target}: {name} lost the input's file mode (a bug: please report it)")
    problem = wheelfile.record_problem(written, record)
    if problem:
        raise BakeError(f"{target}: {problem} (a bug: please report it)")
