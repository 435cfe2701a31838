"""``hatch-precompile`` / ``python -m hatch_precompile``: see and control what is precompiled.

    report TARGET        what a wheel, a project dir or an installed package ships
    verify PACKAGE       replay the workloads after load(); non-zero on any cache miss
    warm PACKAGE         build the caches here, into the per-user cache (--clear removes them)
    bake -o DIR WHEEL... precompile wheels any backend built: run the workload, add the artifacts
    merge -o DIR WHEEL.. one wheel with the artifact sets of wheels built on several machines
    snoop -- COMMAND     run a program: every graph it compiled, who owns it, what the artifacts missed
    disable/enable NAME  per-package switch in this environment's preferences file
    status [NAME...]     the preferences file, the switches in effect, the per-user cache

Each command is a thin layer over one module (report.py, verify.py, warm.py, bake.py, switches.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatch_precompile import __version__
from hatch_precompile.protocol import (
    CPU_TARGETS, DEFAULT_TIMEOUT, DEVICES, EXIT_FOUND, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, PREFERENCES_VAR,
    WORKLOAD,
)
from hatch_precompile.run import gate, preferences, usercache, variables
from hatch_precompile.tools import switches, targets


class CliError(Exception):
    """A usage or target problem: printed as one line, exit status 2."""


def _say(message: str) -> None:
    print(message, flush=True)


def _say_err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- report ------------------------------------------------------------------------------------


def _looks_like_path(target: str) -> bool:
    return target.endswith(".whl") or os.sep in target or "/" in target or target in (".", "..")


def cmd_report(args: argparse.Namespace) -> int:
    target = args.target
    path = Path(target)
    if _looks_like_path(target):
        kind, found = _report_path(target, path)
    else:
        try:
            kind, found = "installed", targets.installed(target)
        except targets.TargetError as exc:
            if not (path.is_dir() and (path / "pyproject.toml").is_file()):
                raise CliError(f"report: {exc}") from None
            # A bare name is a package first; a project dir of that name only when none is installed.
            kind, found = _report_path(target, path)
    if args.json:
        print(json.dumps(_report_json(target, kind, found), indent=1, default=str))
    elif found:
        from hatch_precompile.tools import report

        print(report.render(target, found), end="")
    if not found:
        _say_err(
            f"report: {target} has no precompiled artifacts (built with the hook off, e.g. "
            f"PRECOMPILE=0, or not a hatch-precompile package; `hatch-precompile warm` stores some)"
        )
        return EXIT_FOUND
    return EXIT_OK


def _report_path(target: str, path: Path) -> tuple[str, list[targets.Artifacts]]:
    if path.is_file() and path.suffix == ".whl":
        return "wheel", targets.in_wheel(path)
    if path.is_dir() and (path / "pyproject.toml").is_file():
        return "project", _report_project(path)
    if not path.exists():
        raise CliError(f"report: {target} does not exist (give a wheel, a project dir or a package name)")
    raise CliError(f"report: {target} is neither a .whl file nor a project dir with a pyproject.toml")


def _report_json(target: str, kind: str, found: list[targets.Artifacts]) -> dict[str, Any]:
    from hatch_precompile.tools import report

    return report.as_json(target, kind, found)


def _report_project(project: Path) -> list[targets.Artifacts]:
    """Build the project's precompiled wheel into a temp dir, as `pip install` would, and read it."""
    try:
        import build  # noqa: F401  (only checking that `python -m build` can run)
    except ImportError:
        raise CliError(
            f"report: building {project} needs the `build` package in this environment (pip install build)"
        ) from None
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-report-") as out:
        _say_err(f"report: building {project} (python -m build --wheel --no-isolation) ...")
        # The build's output (the workload's progress lines) goes to stderr; stdout is the report.
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", out, str(project)],
            stdout=2, stderr=None, stdin=subprocess.DEVNULL, check=False,
        )
        wheels = sorted(Path(out).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise CliError(f"report: building {project} failed (exit {proc.returncode}); its output is above")
        found = targets.in_wheel(wheels[-1])
        for artifacts in found:  # the temp dir is gone once we return: name what it was built from
            artifacts.location = f"{project} -> {wheels[-1].name}!{artifacts.location.partition('!')[2]}"
        return found


# -- verify --------------------------------------------------------------------------------------


def _workloads(args: argparse.Namespace, command: str) -> tuple[str, Path, list[str], str]:
    for spec in args.workload or []:
        if not WORKLOAD.fullmatch(spec):
            raise CliError(f"{command}: --workload {spec!r} must look like 'package.module:function'")
    try:
        return targets.workloads(args.package, args.workload)
    except targets.TargetError as exc:
        raise CliError(f"{command}: {exc}") from None


def cmd_verify(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import verify

    try:
        threads = [int(n) for n in (args.threads or "").split(",") if n.strip()]
        if any(n < 1 for n in threads):
            raise ValueError
    except ValueError:
        raise CliError(f"verify: --threads {args.threads!r} must be thread counts, e.g. 1,8") from None
    try:
        replays = verify.variants(threads, [t for text in args.setting or [] for t in text.split(",") if t.strip()])
    except ValueError as exc:
        raise CliError(f"verify: {exc}") from None
    package, _, workloads, source = _workloads(args, "verify")
    say = _say_err if args.json else _say
    say(f"verify {package}: workloads from {source}: {', '.join(workloads)}")
    manifests = _set_manifests(targets, package)
    results = []
    for label, setting in replays:
        if setting:
            say(f"verify {package}: under {label}")
        try:
            results.append((label, verify.run(package, workloads, args.timeout, say, setting, manifests)))
        except verify.VerifyError as exc:
            raise CliError(f"verify: {label}: {exc}" if setting else f"verify: {exc}") from None
    failed = any(r["misses"] or r["unknown"] for _, r in results)
    (_, first), rest = results[0], results[1:]
    if args.json:
        ok = not first["misses"] and not first["unknown"]
        print(json.dumps({"package": package, "ok": ok, **first, "variants": [
            {"setting": label, "ok": not r["misses"] and not r["unknown"], **r} for label, r in rest
        ]}, indent=1))
    else:
        print(verify.render(package, first), end="")
        for label, r in rest:
            print(f"under {label}:")
            print(verify.render(package, r), end="")
    return EXIT_FOUND if failed else EXIT_OK


# -- warm ------------------------------------------------------------------------------------------


def cmd_warm(args: argparse.Namespace) -> int:
    if args.clear:
        if args.workload or args.force:
            raise CliError("warm: --clear takes no --workload or --force")
        package = _import_name(args.package)
        from hatch_precompile.tools import warm

        removed = warm.clear(package)
        if removed is None:
            _say(f"warm --clear: nothing stored for {package} ({usercache.package_dir(package)})")
        else:
            _say(f"warm --clear: removed {removed}")
        return EXIT_OK
    from hatch_precompile.build.capture import Unusable, WorkloadFailed
    from hatch_precompile.tools import warm

    package, directory, workloads, source = _workloads(args, "warm")
    if not args.force:
        fits = warm.shipped_match(package, directory)
        if fits:
            _say(
                f"warm: {package}'s shipped artifacts already match this environment ({fits}); "
                "nothing to do (--force warms anyway)"
            )
            return EXIT_OK
    enabled, why = _decide(package)
    if not enabled:
        _say(f"warm: note: {package} is disabled ({why}); load() will not use what is stored until enabled")
    _say(f"warm {package}: running {', '.join(workloads)} (from {source}) ...")
    try:
        stored, manifest = warm.warm(package, workloads, args.timeout, _say, targets.declared_device(package))
    except (warm.WarmError, WorkloadFailed, Unusable, OSError) as exc:
        why = getattr(exc, "no_gpu", None)
        raise CliError(f"warm: {exc}" + (f" (this machine has no usable GPU: {why})" if why else "")) from None
    total = sum(entry.size for entry in manifest.files.values())
    _say(
        f"warm: stored {len(manifest.files)} files ({total / 1e6:.2f} MB) for torch {manifest.env['torch']}, "
        f"CPU capability {manifest.env['cpu_capability']} in {stored}"
    )
    _say(f"warm: load({package!r}) uses them in this environment when the shipped artifacts do not match")
    return EXIT_OK


def _import_name(name: str) -> str:
    try:
        return targets.import_package(name)[0]
    except targets.TargetError:
        return name  # --clear must work for a package that was uninstalled since


# -- snoop -----------------------------------------------------------------------------------------


def cmd_snoop(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import snoop, targets as found

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.tmin < 0:
        raise CliError("snoop: --tmin must be zero or more seconds")
    say = _say_err if args.json else _say
    try:
        result = snoop.run(command, args.cache_dir, say)
    except snoop.SnoopError as exc:
        raise CliError(f"snoop: {exc}") from None
    report = snoop.analyse(result, args.tmin, lambda package: _set_manifests(found, package))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(json.dumps(report, indent=1, default=str) if args.json else snoop.render(report), end="\n" if args.json else "")
    return report["exit_code"] if isinstance(report["exit_code"], int) else EXIT_FOUND


def _set_manifests(found: Any, package: str) -> list[Any]:
    try:
        return [a.manifest for a in found.installed(package) if a.manifest is not None and a.problem is None]
    except found.TargetError:
        return []


# -- bake ------------------------------------------------------------------------------------------


def cmd_bake(args: argparse.Namespace) -> int:
    from hatch_precompile.build import options as options_module
    from hatch_precompile.tools import bake

    for spec in args.workload or []:
        if not WORKLOAD.fullmatch(spec):
            raise CliError(f"bake: --workload {spec!r} must look like 'package.module:function'")
    try:
        capabilities = options_module.parse({"cpu-capabilities": args.cpu_capabilities.split(",")}, "precompile")\
            .cpu_capabilities if args.cpu_capabilities else ()
    except options_module.OptionError as exc:
        raise CliError("bake: " + str(exc).replace("Option `cpu-capabilities` for build hook `precompile`",
                                                   "--cpu-capabilities")) from None
    for wheel in args.wheels:
        try:
            bake.bake(Path(wheel), Path(args.out), python=args.python or sys.executable, say=_say,
                      workloads=tuple(args.workload or ()), package=args.package,
                      project=Path(args.project) if args.project else None, timeout=args.timeout,
                      device=args.device, cpu_target=args.cpu_target, capabilities=capabilities)
        except bake.BakeError as exc:
            raise CliError(f"bake: {exc}") from None
    return EXIT_OK


# -- merge -----------------------------------------------------------------------------------------


def cmd_merge(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import merge

    try:
        merged, sets = merge.merge([Path(w) for w in args.wheels], Path(args.out))
    except merge.MergeError as exc:
        raise CliError(f"merge: {exc}") from None
    _say(f"merge: {merged}: {len(sets)} artifact set(s): {', '.join(sets)}")
    return EXIT_OK


# -- preferences -----------------------------------------------------------------------------------


def _decide(name: str) -> tuple[bool, str]:
    try:
        return gate.decide(name, True)
    except gate.GateValueError as exc:
        return False, str(exc)


def cmd_switch(args: argparse.Namespace) -> int:
    enabled = args.command == "enable"
    file = preferences.path()
    for name in args.packages:
        if not switches.is_valid_name(name):
            raise CliError(f"{args.command}: {name!r} is not a valid package name")
    for name in args.packages:
        try:
            key, previous = switches.set_enabled(file, name, enabled)
        except preferences.PreferencesError as exc:
            raise CliError(f"{args.command}: {exc}") from None
        except OSError as exc:
            raise CliError(
                f"{args.command}: cannot write the preferences file {file}: {exc}; set "
                f"{PREFERENCES_VAR} to a file you can write"
            ) from None
        value = "true" if enabled else "false"
        unchanged = " (unchanged)" if previous is enabled else ""
        _say(f"{name}: [{key}] enable = {value} in {file}{unchanged}")
        effective, why = _decide(name)
        if effective != enabled:
            _say(f"{name}: note: {why} in the environment overrides the preferences file")
    if sys.version_info < (3, 11):
        _say("note: Python 3.10 has no tomllib: load() reads no preferences here (the build hook does)")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    file = preferences.path()
    source = f"from {PREFERENCES_VAR}" if variables.preferences_file() else "sys.prefix"
    _say(f"preferences file: {file} ({source}; {'exists' if file.is_file() else 'does not exist'})")
    if file.is_file():
        try:
            entries = preferences.read(file, build=True)  # tomlkit where tomllib is missing
        except preferences.PreferencesError as exc:
            raise CliError(f"status: {exc}") from None
        for key, value in entries.values():  # in file order
            _say(f"  [{key}] enable = {'true' if value else 'false'}")
        if not entries:
            _say("  (no package switches)")
    switches_set = variables.all_switches()
    _say("environment switches: " + (", ".join(f"{k}={v}" for k, v in switches_set.items()) or "none"))
    base = usercache.base_dir()
    _say(f"per-user cache (hatch-precompile warm): {base}")
    if base is not None and base.is_dir():
        for directory in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
            stored = usercache.entries(directory.name)
            if not stored:
                continue  # not a warmed package (other hatch-precompile caches live here too)
            size = sum(f.stat().st_size for e in stored for f in e.rglob("*") if f.is_file())
            _say(f"  {directory.name}: {len(stored)} environment(s), {size / 1e6:.2f} MB")
    for name in args.packages:
        enabled, why = _decide(name)
        _say(f"{name}: {'on' if enabled else 'off'} ({why})")
    return EXIT_OK


# -- main ------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    from hatch_precompile.tools.verify import SETTING_FORMS

    top = argparse.ArgumentParser(
        prog="hatch-precompile",
        description="See and control what hatch-precompile precompiles.",
    )
    top.add_argument("--version", action="version", version=f"hatch-precompile {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("report", help="show what a wheel, project dir or installed package ships")
    p.add_argument("target", help="an installed package name, a .whl file, or a project dir (as a path: ./mypkg)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_report)

    for name, help_text in (
        ("verify", "replay the workloads after load() in a fresh process; exit 1 on any cache miss"),
        ("warm", "run the workloads here and keep their caches in the per-user cache"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("package", help="installed package (import or project name)")
        p.add_argument("--workload", action="append", metavar="MODULE:FUNCTION",
                       help="workload to run (repeatable); default: the names in the manifest")
        p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds for all workloads")
        if name == "verify":
            p.add_argument("--json", action="store_true", help="machine-readable output")
            p.add_argument("--threads", metavar="N,N", help="replay again at each thread count (1,8), as users' "
                           "machines run")
            p.add_argument("--setting", action="append", metavar="SETTING",
                           help="replay again under a setting a program may make (repeatable): "
                           + ", ".join(SETTING_FORMS))
            p.set_defaults(func=cmd_verify)
        else:
            p.add_argument("--force", action="store_true", help="warm even if the shipped artifacts match")
            p.add_argument("--clear", action="store_true", help="remove what warm stored for PACKAGE")
            p.set_defaults(func=cmd_warm)

    p = sub.add_parser("snoop", help="run a program and report every graph it compiled, who owns it, and what "
                       "the shipped artifacts missed")
    p.add_argument("--tmin", type=float, default=0.0, metavar="SECONDS", help="leave out graphs compiled faster")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--out", metavar="FILE", help="also write the whole report as JSON to FILE")
    p.add_argument("--cache-dir", metavar="DIR", help="use this Inductor cache dir instead of an empty one")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                   help="python script.py ..., python -m module ..., python -c code, or a console script")
    p.set_defaults(func=cmd_snoop)

    p = sub.add_parser("bake", help="precompile wheels that any build backend made: run the workload, write new wheels "
                       "with the artifacts")
    p.add_argument("wheels", nargs="+", metavar="WHEEL", help="wheels to bake (never modified)")
    p.add_argument("-o", "--out", required=True, metavar="OUT_DIR", help="where the baked wheels are written")
    p.add_argument("--workload", action="append", metavar="MODULE:FUNCTION",
                   help="workload to run (repeatable); default: --project's [tool.hatch-precompile], or the wheel's "
                   "own declaration")
    p.add_argument("--package", help="the package that calls hatch_precompile.load (default: the workload's)")
    p.add_argument("--project", metavar="DIR_OR_SDIST", help="read [tool.hatch-precompile] from this project's "
                   "pyproject.toml")
    p.add_argument("--python", metavar="PYTHON", help="an interpreter with the torch to bake for (default: this one)")
    p.add_argument("--timeout", type=float, help="seconds for all workloads")
    p.add_argument("--device", choices=DEVICES, help="where the workloads run (as the hook's option)")
    p.add_argument("--cpu-target", choices=CPU_TARGETS, help="portable or native kernels (as the hook's option)")
    p.add_argument("--cpu-capabilities", metavar="CAP,CAP", help="one artifact set per ATEN_CPU_CAPABILITY (as the "
                   "hook's option), e.g. default,avx2")
    p.set_defaults(func=cmd_bake)

    p = sub.add_parser("merge", help="one wheel with the artifact sets of wheels built on several machines")
    p.add_argument("wheels", nargs="+", metavar="WHEEL", help="wheels of one project and version")
    p.add_argument("-o", "--out", required=True, metavar="OUT_DIR", help="where the merged wheel is written")
    p.set_defaults(func=cmd_merge)

    for name in ("disable", "enable"):
        p = sub.add_parser(name, help=f"{name} precompiled caches for packages in this environment")
        p.add_argument("packages", nargs="+", metavar="PACKAGE")
        p.set_defaults(func=cmd_switch)

    p = sub.add_parser("status", help="preferences file, switches in effect, per-user cache")
    p.add_argument("packages", nargs="*", metavar="PACKAGE", help="also show the decision for these")
    p.set_defaults(func=cmd_status)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    timeout = getattr(args, "timeout", None)
    if timeout is not None and not timeout > 0:
        print(f"hatch-precompile {args.command}: error: --timeout must be positive", file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.func(args)
    except CliError as exc:
        print(f"hatch-precompile {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
