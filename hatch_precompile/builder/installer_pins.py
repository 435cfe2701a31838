"""The torch the installer was told to install: its pins, read from the installer itself.

``pip install torch==2.13.0 ./pkg``, ``pip install -r requirements.txt`` with torch pinned there,
``-c constraints.txt``, ``PIP_CONSTRAINT``, a ``constraint =`` in pip's configuration, and the
same through ``uv pip install``: the installer builds the package's wheel in an isolated build
environment that it resolves on its own, without those pins (pip 26.2 and later, and uv, apply
none of them there; older pip applies only the constraints from the environment and
configuration), and before it puts torch into the target. The build environment would get
another torch than the target, and the artifacts would be for that one.

The build hook runs as a child of the installer (``/proc/<ppid>``, Linux), so it can read what
the installer was given: its command line, working dir and environment.

- pip: pip's own parser, run in pip's own interpreter, gives its options with pip's
  configuration files and ``PIP_*`` variables merged in, and reads each requirement and
  constraint file as pip does (nested files, line continuations, variables). Where that fails
  (a pip whose internals moved), the command line and the files it names are read here.
- uv: the command line (``uv pip install|sync``), ``UV_CONSTRAINT`` and ``UV_OVERRIDE``, and the
  files they name, read here.

Every torch requirement found (a version, a range, a direct URL) is asked of the build
environment as well, markers evaluated for this interpreter. Standard library and ``packaging``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Mapping

# Runs in pip's interpreter: what pip itself makes of its command line, configuration and files.
_PIP_PARSE = r"""
import json, sys
from pip._internal.cli.main_parser import parse_command
from pip._internal.commands import create_command
from pip._internal.network.session import PipSession
from pip._internal.req.req_file import parse_requirements
name, args = parse_command(json.loads(sys.argv[1]))
command = create_command(name, isolated="--isolated" in args)
options, positional = command.parse_args(args)
session = PipSession()
found = [[a, "pip's command line"] for a in positional]
for kind, files in (("requirements", getattr(options, "requirements", []) or []),
                    ("constraints", getattr(options, "constraints", []) or []),
                    ("build_constraints", getattr(options, "build_constraints", []) or [])):
    for file in files:
        for parsed in parse_requirements(file, session=session, constraint=kind != "requirements"):
            found.append([parsed.requirement, parsed.comes_from or file])
print(json.dumps(found))
"""
_OPTION_FILES = {
    "-r": "requirements", "--requirement": "requirements", "-c": "constraints", "--constraint": "constraints",
    "--override": "overrides", "--build-constraint": "constraints", "--build-constraints": "constraints",
}
_VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)\}")
_HASH_OR_OPTION = re.compile(r"\s+--?[A-Za-z].*$")  # `torch==2.13.0 --hash=sha256:...`


@dataclasses.dataclass(frozen=True)
class Pins:
    """The torch requirements the installer was given, and where each came from."""

    frontend: str  # "pip" or "uv"
    requirements: tuple[str, ...]  # "torch==2.13.0", markers already evaluated
    sources: tuple[str, ...]

    def describe(self) -> str:
        return "; ".join(f"{r} ({s})" for r, s in zip(self.requirements, self.sources))


@dataclasses.dataclass(frozen=True)
class Frontend:
    """The installer process the build hook runs under."""

    argv: list[str]
    environ: dict[str, str]
    cwd: str


def discover(environ: Mapping[str, str] | None = None, pid: int | None = None) -> Pins | None:
    """The torch pins of the installer that started this build, or None (no installer we know,
    nothing pinned, or not Linux)."""
    environ = os.environ if environ is None else environ
    frontend = _frontend(os.getppid() if pid is None else pid)
    if frontend is None:
        return None
    args = _uv_args(frontend.argv, environ)
    if args is not None:
        return _torch_pins("uv", _read_args(args, frontend, ("UV_CONSTRAINT", "UV_OVERRIDE", "UV_BUILD_CONSTRAINT")))
    args = _pip_args(frontend.argv)
    if args is not None:
        found = _pip_parsed(frontend, args)
        if found is None:  # pip's internals moved: read what pip was given ourselves
            found = _read_args(args, frontend, ("PIP_CONSTRAINT", "PIP_REQUIREMENT", "PIP_BUILD_CONSTRAINT"))
        return _torch_pins("pip", found)
    return None


def _frontend(pid: int) -> Frontend | None:
    process = Path(f"/proc/{pid}")
    try:
        argv = [a.decode(errors="replace") for a in (process / "cmdline").read_bytes().split(b"\0") if a]
        entries = (process / "environ").read_bytes().decode(errors="replace").split("\0")
        cwd = os.readlink(process / "cwd")
    except OSError:
        return None
    return Frontend(argv, dict(e.split("=", 1) for e in entries if "=" in e), cwd)


def _pip_args(argv: list[str]) -> list[str] | None:
    """pip's own arguments in an installer's argv, or None when it is not pip."""
    for index, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[index + 1] in ("pip", "pip.__main__"):
            return argv[index + 2:]
    if len(argv) > 1 and os.path.basename(argv[0]).startswith("python") and re.fullmatch(
        r"pip[0-9.]*", os.path.basename(argv[1])
    ):
        return argv[2:]  # [python, /venv/bin/pip, ...]: a console script through its shebang
    if argv and re.fullmatch(r"pip[0-9.]*", os.path.basename(argv[0])):
        return argv[1:]
    return None


def _uv_args(argv: list[str], environ: Mapping[str, str]) -> list[str] | None:
    """``uv pip install|sync``'s arguments, when uv (``$UV``, which uv sets for its builds) is the installer."""
    uv = environ.get("UV", "")
    if not argv or not (os.path.basename(argv[0]) == "uv" or (uv and os.path.realpath(argv[0]) == os.path.realpath(uv))):
        return None
    words = [a for a in argv[1:] if not a.startswith("-")]
    if words[:2] not in (["pip", "install"], ["pip", "sync"]):
        return None
    return argv[argv.index(words[1]) + 1:]


def _python_of(frontend: Frontend) -> str | None:
    """pip's interpreter as it was started (its argv[0]; /proc's exe resolves the venv away)."""
    first = frontend.argv[0]
    if "/" in first:
        return os.path.normpath(os.path.join(frontend.cwd, first))
    for directory in frontend.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(frontend.cwd, directory, first)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _pip_parsed(frontend: Frontend, args: list[str]) -> list[tuple[str, str]] | None:
    python = _python_of(frontend)
    if python is None:
        return None
    clean = {k: v for k, v in frontend.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE")}
    try:
        proc = subprocess.run([python, "-c", _PIP_PARSE, json.dumps(args)], env=clean, cwd=frontend.cwd,
                              capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
        found = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    if not isinstance(found, list):
        return None
    return [(str(line), str(source)) for line, source in found]


def _read_args(args: list[str], frontend: Frontend, variables: tuple[str, ...]) -> list[tuple[str, str]]:
    """Requirement lines from a command line, the files its options name, and the files named by
    ``variables`` (whitespace-separated, as pip and uv read them)."""
    found: list[tuple[str, str]] = []
    files: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        option, _, value = arg.partition("=")
        if option in _OPTION_FILES:
            if value:
                files.append(value)
            elif index + 1 < len(args):
                files.append(args[index + 1])
                index += 1
        elif not arg.startswith("-"):
            found.append((arg, "the command line"))
        index += 1
    for variable in variables:
        files.extend(frontend.environ.get(variable, "").split())
    seen: set[Path] = set()
    for file in files:
        found.extend(_read_file(Path(frontend.cwd, file), frontend.environ, seen))
    return found


def _read_file(path: Path, environ: Mapping[str, str], seen: set[Path]) -> list[tuple[str, str]]:
    """The requirement lines of a requirements or constraints file, nested files included."""
    path = path.resolve()
    if path in seen:
        return []
    seen.add(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found: list[tuple[str, str]] = []
    for line in re.sub(r"\\\n", "", text).splitlines():
        line = _VARIABLE.sub(lambda m: environ.get(m[1], m[0]), line.split(" #", 1)[0]).strip()
        if not line or line.startswith("#"):
            continue
        option, _, value = line.partition(" ") if not line.startswith("--") or "=" not in line else line.partition("=")
        if option in _OPTION_FILES and value.strip():
            found.extend(_read_file(path.parent / value.strip(), environ, seen))
        elif not line.startswith("-"):
            found.append((_HASH_OR_OPTION.sub("", line), str(path)))
    return found


def merged(requirements: list[str]) -> list[str]:
    """``requirements`` on torch as one, their specifiers intersected (markers evaluated here).

    hatchling hands the build's dependencies to pip sorted, and pip's resolver reads the best
    candidate of the first one alone (``torch<=2.14.1``: the newest torch, its whole wheel where
    the index has no separate metadata) before it intersects: one requirement avoids that.
    A URL or extras keep the list as it is."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    parsed = [Requirement(r) for r in requirements]
    parsed = [r for r in parsed if r.marker is None or r.marker.evaluate()]
    if not parsed or any(r.url or r.extras for r in parsed):
        return list(requirements)
    specifier = SpecifierSet()
    for requirement in parsed:
        specifier &= requirement.specifier
    return [f"{parsed[0].name}{specifier}"]


def _torch_pins(frontend: str, lines: list[tuple[str, str]]) -> Pins | None:
    """The lines that pin torch (a version, a range or a URL), markers evaluated here."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    requirements, sources = [], []
    for line, source in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue  # a path or URL of a project, an editable: not torch's pin
        if canonicalize_name(requirement.name) != "torch" or not (requirement.specifier or requirement.url):
            continue
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        requirement.marker = None
        requirement.extras = set()
        if str(requirement) not in requirements:
            requirements.append(str(requirement))
            sources.append(source)
    return Pins(frontend, tuple(requirements), tuple(sources)) if requirements else None
