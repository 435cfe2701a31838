"""``hatch-precompile report TARGET``: what a wheel, a project dir or an installed package ships."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatch_precompile.errors import NotFound, UsageError
from hatch_precompile.protocol import EXIT_OK
from hatch_precompile.tools import targets


def configure(subparsers: Any) -> None:
    p = subparsers.add_parser("report", help="show what a wheel, project dir or installed package ships")
    p.add_argument("target", help="an installed package name, a .whl file, or a project dir (as a path: ./mypkg)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import report

    target = args.target
    path = Path(target)
    if _looks_like_path(target):
        kind, found = _report_path(target, path)
    else:
        try:
            kind, found = "installed", targets.installed(target)
        except targets.TargetNotFound:
            if not (path.is_dir() and (path / "pyproject.toml").is_file()):
                raise
            # A bare name is a package first; a project dir of that name only when none is installed.
            kind, found = _report_path(target, path)
    if args.json:
        print(json.dumps(report.as_json(target, kind, found), indent=1, default=str))
    elif found:
        print(report.render(target, found), end="")
    if not found:
        raise NotFound(f"{target} has no precompiled artifacts (built with the hook off, e.g. PRECOMPILE=0, or "
                       "not a hatch-precompile package; `hatch-precompile warm` stores some)")
    return EXIT_OK


def _looks_like_path(target: str) -> bool:
    return target.endswith(".whl") or os.sep in target or "/" in target or target in (".", "..")


def _report_path(target: str, path: Path) -> tuple[str, list[targets.Artifacts]]:
    if path.is_file() and path.suffix == ".whl":
        return "wheel", targets.in_wheel(path)
    if path.is_dir() and (path / "pyproject.toml").is_file():
        return "project", _report_project(path)
    if not path.exists():
        raise UsageError(f"{target} does not exist (give a wheel, a project dir or a package name)")
    raise UsageError(f"{target} is neither a .whl file nor a project dir with a pyproject.toml")


def _report_project(project: Path) -> list[targets.Artifacts]:
    """Build the project's precompiled wheel into a temp dir, as `pip install` would, and read it."""
    try:
        import build  # noqa: F401  (only checking that `python -m build` can run)
    except ImportError:
        raise UsageError(f"building {project} needs the `build` package in this environment (pip install build)") from None
    from hatch_precompile.build import elf

    elf.require_publishing_tools(f"building {project}: ")  # the build would stop on it: say which extra
    with tempfile.TemporaryDirectory(prefix="hatch-precompile-report-") as out:
        print(f"report: building {project} (python -m build --wheel --no-isolation) ...", file=sys.stderr, flush=True)
        # The build's output (the workload's progress lines) goes to stderr; stdout is the report.
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", out, str(project)],
            stdout=2, stderr=None, stdin=subprocess.DEVNULL, check=False,
        )
        wheels = sorted(Path(out).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise UsageError(f"building {project} failed (exit {proc.returncode}); its output is above")
        found = targets.in_wheel(wheels[-1])
        for artifacts in found:  # the temp dir is gone once we return: name what it was built from
            artifacts.location = f"{project} -> {wheels[-1].name}!{artifacts.location.partition('!')[2]}"
        return found
