"""Which environment a build's workload runs in: the one being installed into, when it has torch.

Artifacts are valid only for the torch that compiled them. An isolated build resolves the
project's torch requirement on its own and may pick another torch than the one the user
installed first (a CUDA build instead of their CPU one). So when the environment the wheel is
for (the *target*) already has a torch that satisfies the project's requirement, the workload
runs with the target's interpreter and packages, and the build environment needs no torch.

What each frontend shows the backend of the target (measured; see the README):

- pip's default isolation (``pip install``, ``pip wheel``, an sdist from an index): the backend
  runs on the target's own interpreter, its site-packages hidden behind a ``sitecustomize`` on
  ``PYTHONPATH``; ``sys.executable`` started without those variables *is* the target.
- ``python -m build`` (and pip's ``venv-isolation``): a venv of their own, made by the stdlib
  ``venv`` of the frontend's interpreter, which ``pyvenv.cfg`` names (``command = ...``); an
  activated environment shows as ``VIRTUAL_ENV``.
- uv: a venv of its own with ``VIRTUAL_ENV`` pointing at it; uv is the backend's parent process,
  so the target is what uv itself discovers: ``--python``, then the ``VIRTUAL_ENV`` or
  ``CONDA_PREFIX`` uv was started with, then a ``.venv`` above its working dir (Linux only).
- anything else (``hatch build``): ``HATCH_PRECOMPILE_TARGET`` names the target's interpreter
  or environment dir.

When the installer was told which torch to install (``pip install torch==2.13.0 ./pkg``, a
requirements or constraints file: installer_pins.py) and the target does not have that torch yet, the
build environment is given the same pins, so that it gets the torch the target will get.

Where no target is found, or it has no suitable torch and nothing is pinned, the build
environment's torch is used, as before (an installer then puts its own resolution of torch into a
torch-less target too). Standard library and ``packaging`` only; torch is never imported here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping

from hatch_precompile.builder import installer_pins
from hatch_precompile.errors import TargetEnvError
from hatch_precompile.protocol import TARGET_VAR
from hatch_precompile.run import variables

# Set by frontends to point the backend at their isolated env; never meant for the target.
BUILD_ENV_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "__PYVENV_LAUNCHER__")

# Runs in a candidate interpreter: what is installed there, without importing it.
_PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, os, re, site, sys
try:
    torch = md.version("torch")
except md.PackageNotFoundError:
    torch = None
spec = iu.find_spec("torch") if torch else None
try:  # torch.__version__ has the local tag (2.14.1+cu130) that the distribution's version lacks
    text = open(os.path.join(os.path.dirname(spec.origin), "version.py")).read()
    torch = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M).group(1)
except Exception:
    pass
sites = list(getattr(site, "getsitepackages", lambda: [])())
print(json.dumps({
    "python": sys.executable, "prefix": sys.prefix, "cache_tag": sys.implementation.cache_tag,
    "torch": torch, "torch_dir": os.path.dirname(spec.origin) if spec and spec.origin else None,
    "site_packages": [os.path.realpath(p) for p in sites],
}))
"""


@dataclasses.dataclass(frozen=True)
class Environment:
    """A Python environment as its own interpreter sees it."""

    python: str
    prefix: str
    cache_tag: str
    torch: str | None
    torch_dir: str | None
    site_packages: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Choice:
    """Where the workload runs: ``target`` (another interpreter), or None for this process's env."""

    target: Environment | None
    why: str  # one line for the build output: which torch the artifacts are for, and why
    pins: tuple[str, ...] = ()  # torch requirements the build environment must get as well
    torch_from: str = "build environment"  # "target", "pins", "build environment" (for the manifest)

    @property
    def python(self) -> str:
        return self.target.python if self.target is not None else sys.executable

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """The child's environment: the target's own view, writing nothing into it."""
        if self.target is None:
            return dict(base)
        env = clean_environ(base)
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # no .pyc files left in the target or the project
        return env


def clean_environ(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in BUILD_ENV_VARS}


def probe(python: str, environ: Mapping[str, str]) -> Environment | None:
    """What ``python`` sees when started without the frontend's variables; None if it cannot run."""
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE], env=clean_environ(environ), capture_output=True, text=True,
            timeout=120, check=False, stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            return None
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        return Environment(
            python=data["python"], prefix=data["prefix"], cache_tag=data["cache_tag"], torch=data["torch"],
            torch_dir=data["torch_dir"], site_packages=tuple(data["site_packages"]),
        )
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError, TypeError):
        return None


def interpreter_of(location: str) -> str:
    """The interpreter of an environment dir, or ``location`` itself when it is an interpreter."""
    path = Path(location)
    if path.is_dir():
        for candidate in (path / "bin" / "python", path / "Scripts" / "python.exe"):
            if candidate.exists():
                return str(candidate)
    return str(path)


def choose(
    requirement: str | None, environ: Mapping[str, str] | None = None, pins: installer_pins.Pins | None = None
) -> Choice:
    """Decide where the workload runs. ``requirement``: the project's torch requirement, if any;
    ``pins``: the installer's (pins.discover()), if any."""
    environ = os.environ if environ is None else environ
    explicit = variables.target(environ)
    if explicit:
        return _explicit(explicit, requirement, environ)
    own = probe(sys.executable, environ)
    if own is not None and own.site_packages and not _visible(own):
        return _use(own, "pip's interpreter", requirement, pins)
    version, directory = _this_process_torch()
    pinned_here = pins is None or all(_satisfies(version or "", pin) for pin in pins.requirements)
    if version is not None and _satisfies(version, requirement) and pinned_here:
        if pins:  # a build env given the pinned torch (or no isolation, with that torch there)
            return _pinned(pins, "it was given the pinned torch")
        # No isolation (or a build env that was given torch): what runs the build is the target.
        return Choice(None, f"torch {version} of the environment running the build ({directory})", torch_from="target")
    for find in _FINDERS:
        found = find(environ)
        if found is not None:
            location, via = found
            env = probe(interpreter_of(location), environ)
            if env is not None and not _same_env(env):
                return _use(env, via, requirement, pins)
    if pins:
        return _pinned(pins, "the installer names no target environment")
    return _build_env(
        "this frontend does not say which environment the wheel is for "
        f"(set {TARGET_VAR}=/path/to/its/python to build for that environment's torch)"
    )


def _virtual_env(environ: Mapping[str, str]) -> tuple[str, str] | None:
    venv = environ.get("VIRTUAL_ENV", "").strip()
    return (venv, "VIRTUAL_ENV") if venv else None


def _venv_creator(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The interpreter whose stdlib ``venv`` made this throwaway build venv (``python -m build``).
    Read from this process's ``sys.prefix``: ``environ`` is unused, taken as every one of _FINDERS takes it."""
    if not Path(sys.prefix).name.startswith(_FRONTEND_VENVS):
        return None  # a user's own venv: its creator is just the base Python
    try:
        text = (Path(sys.prefix) / "pyvenv.cfg").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "command":  # "command = /venv/bin/python -m venv --without-pip /tmp/build-env-x"
            try:
                argv = shlex.split(value.strip())
            except ValueError:
                return None
            if argv and "--without-pip" in argv:
                return argv[0], "the interpreter that made the build venv"
    return None


# Temp venvs of pypa/build and of pip's venv-isolation.
_FRONTEND_VENVS = ("build-env-", "pip-build-env-")


def _uv_parent(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """What uv, the backend's parent process, installs into: uv's own discovery order."""
    uv = environ.get("UV", "")
    parent = Path(f"/proc/{os.getppid()}")
    try:
        if not uv or os.path.realpath(parent / "exe") != os.path.realpath(uv):
            return None
        argv = [a.decode(errors="replace") for a in (parent / "cmdline").read_bytes().split(b"\0")]
        entries = (parent / "environ").read_bytes().decode(errors="replace").split("\0")
        cwd = Path(os.readlink(parent / "cwd"))
    except OSError:
        return None
    uv_environ = dict(entry.split("=", 1) for entry in entries if "=" in entry)
    requested = _option(argv, "--python", "-p") or uv_environ.get("UV_PYTHON")
    if requested and (cwd / requested).exists():  # a path; a version request ("3.11") names no env
        return str(cwd / requested), "uv's --python"
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if uv_environ.get(var):
            return str(cwd / uv_environ[var]), f"uv's {var}"
    for directory in (cwd, *cwd.parents):
        if (directory / ".venv" / "pyvenv.cfg").is_file():
            return str(directory / ".venv"), "uv's .venv"
    return None


def _option(argv: list[str], *names: str) -> str | None:
    for index, arg in enumerate(argv):
        if arg in names and index + 1 < len(argv):
            return argv[index + 1]
        for name in names:
            if arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None


_FINDERS: tuple[Callable[[Mapping[str, str]], tuple[str, str] | None], ...] = (
    _virtual_env, _venv_creator, _uv_parent,
)


def _use(target: Environment, via: str, requirement: str | None, pins: installer_pins.Pins | None = None) -> Choice:
    where = f"the target environment {target.prefix} ({via})"
    problem = _unsuitable(target, requirement)
    if problem is None and pins and not all(_satisfies(target.torch or "", pin) for pin in pins.requirements):
        problem = f"has torch {target.torch}, and the installer was told to install {', '.join(pins.requirements)}"
    if problem is None:
        return Choice(target, f"torch {target.torch} of {where}; the workload runs there", torch_from="target")
    if pins:
        return _pinned(pins, f"{where} {problem}")
    if target.torch is None:
        problem += ", so the installer puts the build's resolution there too"
    return _build_env(f"{where} {problem}")


def _pinned(pins: installer_pins.Pins, why: str) -> Choice:
    """The build environment, given the torch the installer was told to install into the target."""
    version, directory = _this_process_torch()
    given = f"torch {version} of the build environment ({directory})" if version else "the build environment's torch"
    return Choice(None, f"{given}: {why}, and {pins.frontend} was told to install {pins.describe()}", pins.requirements,
                  "pins")


def _explicit(location: str, requirement: str | None, environ: Mapping[str, str]) -> Choice:
    python = interpreter_of(location)
    env = probe(python, environ)
    if env is None:
        raise TargetEnvError(f"{TARGET_VAR}={location!r}: {python} does not run as a Python interpreter")
    problem = _unsuitable(env, requirement)
    if problem is not None:
        raise TargetEnvError(f"{TARGET_VAR}={location!r}: that environment ({env.prefix}) {problem}")
    if _same_env(env) and _visible(env):
        return Choice(None, f"torch {env.torch} of the environment running the build ({env.prefix}, {TARGET_VAR})")
    return Choice(env, f"torch {env.torch} of the target environment {env.prefix} ({TARGET_VAR}); the workload runs there")


def _unsuitable(env: Environment, requirement: str | None) -> str | None:
    """Why the workload cannot run in ``env`` for this wheel, or None."""
    if env.torch is None:
        return "has no torch yet"
    if requirement and not _satisfies(env.torch, requirement):
        return f"has torch {env.torch}, which does not satisfy {requirement}"
    here = sys.implementation.cache_tag
    if env.cache_tag != here:
        return f"runs {env.cache_tag}, this build {here} (the wheel is tagged for the build's Python)"
    return None


def _build_env(why: str) -> Choice:
    version, directory = _this_process_torch()
    if version is None:
        return Choice(None, f"the torch the build environment is given: {why}")
    return Choice(None, f"torch {version} of the build environment ({directory}): {why}")


def _satisfies(version: str, requirement: str | None) -> bool:
    if not requirement:
        return True
    from packaging.requirements import Requirement  # the build hook's dependency; never on load()'s path

    parsed = Requirement(requirement)
    if parsed.url:  # a direct reference: its file name says the version (torch-2.13.0+cpu-cp311-...)
        from packaging.utils import InvalidWheelFilename, parse_wheel_filename

        try:
            return bool(version) and str(parse_wheel_filename(parsed.url.rsplit("/", 1)[-1].replace("%2B", "+"))[1]) == version
        except InvalidWheelFilename:
            return False
    return bool(version) and parsed.specifier.contains(version, prereleases=True)


def _this_process_torch() -> tuple[str | None, str | None]:
    """(version, package dir) of the torch this build process would import."""
    import importlib.util
    from importlib import metadata

    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None, None
    spec = importlib.util.find_spec("torch")
    directory = os.path.dirname(spec.origin) if spec and spec.origin else None
    try:  # with its local tag, as torch.__version__ says it (the probe above does the same)
        found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", Path(directory or "", "version.py").read_text(), re.M)
        version = found.group(1) if found else version
    except OSError:
        pass
    return version, directory


def _same_env(env: Environment) -> bool:
    return os.path.realpath(env.prefix) == os.path.realpath(sys.prefix)


def _visible(env: Environment) -> bool:
    """Whether this process imports from ``env``'s site-packages (no isolation, or its own venv)."""
    here = {os.path.realpath(p) for p in sys.path if p}
    return any(site in here for site in env.site_packages)
