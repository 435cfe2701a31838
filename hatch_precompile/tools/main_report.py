"""``hatch-precompile report TARGET``: what a wheel, a project dir or an installed package ships."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatch_precompile.errors import NotFound, TargetNotFound, UsageError
from hatch_precompile.protocol import EXIT_OK
from hatch_precompile.tools import arguments, command_targets


def configure(subparsers: Any) -> None:
    p = arguments.command(subparsers, "report", "show what a wheel, project dir or installed package ships", """
        Per artifact set: the environment it serves, the files and bytes by kind, each workload's
        graphs (largest compile time first, with function and file:line), graph breaks, recompiles,
        float64 computed in compiled graphs, the steps shipped ahead of time and the phases of
        torch's compile time. A project dir is built first (python -m build --wheel --no-isolation,
        its output on stderr). For an installed package, also what `warm` stored for it. Exit 1 when
        there is nothing precompiled.""", """
        hatch-precompile report mypkg                     # installed: import or project name
        hatch-precompile report dist/mypkg-1.0-cp311-cp311-manylinux_2_28_x86_64.whl
        hatch-precompile report ./mypkg                   # a project dir: built first
        hatch-precompile report --json mypkg | jq '.artifacts[].summary.workloads'""")
    p.add_argument("target", help="an installed package name, a .whl file, or a project dir (as a path: ./mypkg)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import report

    target = args.target
    path = Path(target)
    if _looks_like_path(target):
        kind, found = _report_path(target, path, arguments.quiet(args))
    else:
        try:
            kind, found = "installed", command_targets.installed(target)
        except TargetNotFound:
            if not (path.is_dir() and (path / "pyproject.toml").is_file()):
                raise
            # A bare name is a package first; a project dir of that name only when none is installed.
            kind, found = _report_path(target, path, arguments.quiet(args))
    missing = None if found else NotFound(
        f"{target} has no precompiled artifacts (built with the hook off, e.g. PRECOMPILE=0, or not a "
        "hatch-precompile package; `hatch-precompile warm` stores some)")
    if args.json:  # one document, what was found and the error together
        error = arguments.error_document(args.command, missing, missing.exit_code) if missing else {}
        arguments.print_json({**report.as_json(target, kind, found), **error})
        if missing:
            print(f"hatch-precompile {args.command}: {missing}", file=sys.stderr)
            return missing.exit_code
    elif found:
        print(report.render(found), end="")
    if missing:
        raise missing
    return EXIT_OK


def _looks_like_path(target: str) -> bool:
    return target.endswith(".whl") or os.sep in target or "/" in target or target in (".", "..")


def _report_path(target: str, path: Path, quiet: bool = False) -> tuple[str, list[command_targets.Artifacts]]:
    if path.is_file() and path.suffix == ".whl":
        return "wheel", command_targets.in_wheel(path)
    if path.is_dir() and (path / "pyproject.toml").is_file():
        return "project", _report_project(path, quiet)
    if not path.exists():
        raise UsageError(f"{target} does not exist (give a wheel, a project dir or a package name)")
    raise UsageError(f"{target} is neither a .whl file nor a project dir with a pyproject.toml")


def _report_project(project: Path, quiet: bool = False) -> list[command_targets.Artifacts]:
    """Build the project's precompiled wheel into a temp dir, as `pip install` would, and read it;
    the build's output on stderr (``quiet``: only where it fails)."""
    try:
        import build  # noqa: F401  (only checking that `python -m build` can run)
    except ImportError:
        raise UsageError(f"building {project} needs the `build` package in this environment (pip install build)") from None
    from hatch_precompile.builder.sets import elf

    elf.require_publishing_tools(f"building {project}: ")  # the build would stop on it: say which extra
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-report-") as out:
        if not quiet:
            arguments.say_err(f"report: building {project} (python -m build --wheel --no-isolation) ...")
        # The build's output (the workload's progress lines) goes to stderr; stdout is the report.
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", out, str(project)],
            stdout=subprocess.PIPE if quiet else 2, stderr=subprocess.STDOUT if quiet else None,
            stdin=subprocess.DEVNULL, check=False, text=True, errors="replace",
        )
        wheels = sorted(Path(out).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            said = "\n".join((proc.stdout or "").splitlines()[-40:]) if quiet else ""
            raise UsageError(f"building {project} failed (exit {proc.returncode}); "
                             + (f"its last lines:\n{said}" if quiet else "its output is above"))
        found = command_targets.in_wheel(wheels[-1])
        for artifacts in found:  # the temp dir is gone once we return: name what it was built from
            artifacts.location = f"{project} -> {wheels[-1].name}!{artifacts.location.partition('!')[2]}"
        return found
