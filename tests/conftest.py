"""Shared fixtures: real wheels, real venvs, real torch. Expensive ones are session-scoped."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import venv
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
INTEGRATION = Path(__file__).resolve().parent / "integration"
SAMPLE = ROOT / "sample_pkg"
STEP_PKG = ROOT / "tests" / "step_pkg"  # save_step / load_step, end to end
SERVE_PKG = ROOT / "tests" / "serve_pkg"  # real models' exported steps, served as users hold them
TEST_USER_CACHE = tempfile.mkdtemp(prefix="hatch-precompile-tests-user-cache-")
# The test processes' temp dir, removed at the end: torch leaves a ~150 MB prefix header per venv
# under the temp dir after a cold compile, and this suite makes dozens of venvs.
TEST_TMPDIR = tempfile.mkdtemp(prefix="hatch-precompile-tests-tmp-")
TORCH_REQUIREMENT = f"torch=={metadata.version('torch').split('+')[0]}"
# A file each run() appends its command's seconds to, when set: what to cut when the suite is slow.
COMMAND_TIMES = os.environ.get("SUITE_COMMAND_TIMES")


# The slow tier: a test that builds a wheel or a venv, or runs torch in fresh processes. These
# fixtures do; whole modules that do say so with `pytestmark`. `pytest -m "not slow"` runs the rest.
SLOW_FIXTURES = frozenset({
    "hp_dist", "precompiled_build", "precompiled_wheel", "runtime_python", "notorch_python", "cold_result", "eager_result", "links",
    "target", "torch_wheels", "fleet_wheel", "single_wheels", "graph_break_build", "gpu_site", "build_tmpdir",
    "step_wheel", "step_site", "serve_site",
})


# Two workers' venvs and builds at once (torch 2.14.1's venv alone is 5 GB): below this, pip and the
# builds fail with OSError rather than a test saying why.
DISK_NEEDED_GB = 10


def pytest_report_header(config):
    free = shutil.disk_usage(tempfile.gettempdir()).free / 2**30
    note = "" if free >= DISK_NEEDED_GB else f": too little, the slow tests need about {DISK_NEEDED_GB} GB"
    return f"free space under {tempfile.gettempdir()}: {free:.1f} GB{note}"


def pytest_sessionfinish(session, exitstatus):
    for path in (TEST_USER_CACHE, TEST_TMPDIR):
        shutil.rmtree(path, ignore_errors=True)


def pytest_collection_modifyitems(items):
    """tests/unit/: in-process, no compile; tests/integration/: real wheels, venvs, frontends and fresh
    processes, marked slow (as is any test that asks for a slow fixture), so that
    `pytest -m "not slow"` (or `pytest tests/unit`) is the edit-test loop."""
    for item in items:
        if INTEGRATION in Path(str(item.fspath)).parents or SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # The longest modules first, so that on two workers none of them starts last and runs alone
    # (pyproject.toml keeps pytest-xdist from reordering them by their number of tests).
    items.sort(key=lambda item: LONGEST_MODULES.index(item.path.name) if item.path.name in LONGEST_MODULES
               else len(LONGEST_MODULES))


# Longest first, by each module's time on its worker in the last clean clone (SUITE_COMMAND_TIMES, 2026-12-07:
# 5.6 to 1.7 minutes): the 3 GB torch installs, the served route's builds and situations, frontends' flows.
LONGEST_MODULES = ("test_newest_torch.py", "test_newest_torch_steps.py", "test_served_situations.py",
                   "test_served_compiles.py", "test_pinned_installs.py", "test_install_flow.py", "test_cli.py",
                   "test_dependency_compiles.py", "test_serve.py", "test_exported.py", "test_bake.py",
                   "test_touchpoints.py", "test_oldest_torch.py", "test_why.py")


GPUS_VISIBLE = False  # test_gpu.py turns it on for its own processes


@functools.lru_cache(maxsize=None)
def has_cuda() -> bool:
    """Whether the torch that runs the tests sees a GPU (in a child: this process never inits CUDA)."""
    code = "import torch; print(torch.cuda.is_available())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return proc.stdout.strip() == "True"


@pytest.fixture
def no_gpu() -> None:
    """For a test of what a machine without a GPU does: skipped on one (test_gpu.py runs there)."""
    if has_cuda():
        pytest.skip("shows what a machine without a GPU does")


def run(cmd, *, env=None, cwd=None, check=True, timeout=1200) -> subprocess.CompletedProcess:
    """Run ``cmd``; stdout and stderr together in ``.stdout``; fail loudly with the output."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PRECOMPILE", "HATCH_BUILD"))}
    for name in ("TORCHINDUCTOR_CACHE_DIR", "VIRTUAL_ENV", "HATCH_PRECOMPILE_TARGET"):
        full_env.pop(name, None)  # each test says which environment a build is for
    full_env.pop("CI", None)  # a user's machine, wherever the suite runs; a test that builds as CI says so
    full_env.pop("GITHUB_ACTIONS", None)  # likewise: a build's lines are folded only where a test asks
    full_env["XDG_CACHE_HOME"] = TEST_USER_CACHE  # keep the machine's ~/.cache out of it
    # Exporting a step costs every build ~10 s: only the builds that test steps export them (they
    # say HATCH_PRECOMPILE_NO_STEPS=0); the rest ship the steps' warm fallback, as on a torch without.
    full_env["HATCH_PRECOMPILE_NO_STEPS"] = "1"
    # Likewise the second pass (the compiled functions' Dynamo cache entries): the builds that test
    # it, or stand for a user's build, say HATCH_PRECOMPILE_NO_DYNAMO_CACHE=0.
    full_env["HATCH_PRECOMPILE_NO_DYNAMO_CACHE"] = "1"
    full_env["TMPDIR"] = TEST_TMPDIR
    if not GPUS_VISIBLE:  # the CPU path, on any machine: a GPU's tests are test_gpu.py's
        full_env["CUDA_VISIBLE_DEVICES"] = full_env["HIP_VISIBLE_DEVICES"] = ""
    full_env.update(env or {})
    started = time.perf_counter()
    proc = subprocess.run(
        [str(c) for c in cmd],
        env=full_env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    if COMMAND_TIMES:  # where the suite's minutes go, command by command (SUITE_COMMAND_TIMES)
        with open(COMMAND_TIMES, "a") as times:
            times.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
                                    "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
                                    "ended": round(time.time(), 1),  # with the worker: how busy each was, when
                                    "seconds": round(time.perf_counter() - started, 1),
                                    "command": " ".join(map(str, cmd))[:300]}) + "\n")
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-6000:]}")
    return proc


def built_once(tmp_path_factory, name: str, make: Callable[[Path], object]) -> Path:
    """A dir that ``make`` fills once per test run, for read-only things (wheels, logs). Under
    pytest-xdist (.ci/run runs two workers) the workers share it: the first to ask builds it while
    the others wait on its lock, as pytest-xdist's docs show for session fixtures."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # one dir per run, above the workers' own
    directory, done = root / f"once-{name}", root / f"once-{name}.done"
    with FileLock(f"{directory}.lock"):
        if not done.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            make(directory)
            done.touch()
    return directory


def make_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin" / "python"


def users_cache(name: str) -> Path:
    """A dir in the cache of the user running the suite, kept between runs (run() points
    XDG_CACHE_HOME at the suite's own, removed after it)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / name


def install_torch(python: Path, requirement: str) -> None:
    """``requirement`` (a torch, with its CUDA libraries where it has them) into ``python``'s venv,
    for a test about what comes after: pip unpacks its 1-5 GB into each venv and byte-compiles it
    (75-135 s here), uv links it from its cache and byte-compiles it (11 s for 2.14.1, 32 s when
    copied; without the bytecode, where PYTHONDONTWRITEBYTECODE is set, each process compiles
    torch's sources again). The wheels are those pip finds on this machine, downloaded once into
    the user's cache (uv reads no pip config). Linked: a test that edits a file of the venv gives
    it a copy of its own first (``own_copy``), or it would edit uv's cache; so does one that reads
    the files' ctimes, which change whenever uv links the same files into another venv. A test of how pip
    installs torch, or of what a build writes into torch's dir, installs it with pip."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    assert uv, "uv is a test dependency"
    cache = users_cache("hatch-precompile-tests")
    wheels = cache / "wheels" / re.sub(r"[^\w.=+-]", "_", requirement)
    with FileLock(f"{wheels}.lock"):
        if not (wheels / "complete").exists():
            shutil.rmtree(wheels, ignore_errors=True)
            run([sys.executable, "-m", "pip", "download", "-q", "-d", wheels, requirement],
                env={"PIP_CACHE_DIR": str(users_cache("pip"))})
            (wheels / "complete").touch()
    run([uv, "pip", "install", "-q", "--python", python, "--no-index", "--find-links", wheels, "--link-mode",
         "hardlink", "--compile-bytecode", requirement], env={"UV_CACHE_DIR": str(cache / "uv")})


def venv_with_torch(path: Path, requirement: str) -> tuple[Path, str]:
    """A fresh venv at ``path`` with ``requirement`` installed (install_torch): its python, and the
    version its torch reports."""
    python = make_venv(path)
    install_torch(python, requirement)
    return python, run([python, "-c", "import torch; print(torch.__version__)"]).stdout.strip().splitlines()[-1]


def own_copy(path: Path) -> Path:
    """``path``, a file or a dir of a venv install_torch made, as this venv's own (not linked to uv's
    cache), bytes and times kept: editing it edits only this venv, and uv linking its cache into
    another venv (which changes the ctime of every file linked) changes nothing of it."""
    copy = path.with_name(path.name + ".own")
    if path.is_dir():
        shutil.copytree(path, copy, symlinks=True)
        shutil.rmtree(path)  # the venv's links only: uv's cache keeps its files
        copy.rename(path)
    else:
        shutil.copy2(path, copy)
        os.replace(copy, path)
    return path


def copy_project(dest: Path, source: Path = SAMPLE) -> Path:
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("dist", "__pycache__", "*.egg-info"))
    return dest


def build_wheel(project: Path, out: Path, *, python=sys.executable, env=None, check=True, umask: str | None = None):
    """Build ``project``'s wheel without isolation (under ``umask``, where given); return (process,
    wheel path or None)."""
    out.mkdir(parents=True, exist_ok=True)
    under = ["sh", "-c", f'umask {umask} && exec "$@"', "sh"] if umask else []
    proc = run([*under, python, "-m", "build", "--wheel", "--no-isolation", "-o", out, project], env=env, check=check)
    wheels = sorted(out.glob("*.whl"))
    return proc, (wheels[-1] if wheels else None)


def unpack(wheel: Path, dest: Path) -> Path:
    """Install a wheel the cheap way (its files, no metadata processing) into ``dest``."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest)
    return dest


def read_manifest(wheel: Path) -> dict:
    """The manifest of the wheel's one artifact set."""
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if re.fullmatch(r"sample_pkg/_precompiled/sets/[^/]+/manifest\.json", n)]
        return json.loads(archive.read(member))


def set_manifest(site: Path) -> Path:
    """The manifest file of the one artifact set of sample_pkg unpacked into ``site``."""
    (path,) = (site / "sample_pkg" / "_precompiled" / "sets").glob("*/manifest.json")
    return path


def blob(site: Path, manifest: dict, path: str) -> Path:
    """Where the bytes of the artifact ``path`` are, in sample_pkg unpacked into ``site``."""
    return site / "sample_pkg" / "_precompiled" / "blobs" / manifest["files"][path]["sha256"]


def run_fresh(python: Path, args: list, cache_dir: Path, env=None, pythonpath: Path | None = None) -> dict:
    """``python *args`` in a fresh process with ``cache_dir`` as Inductor's cache: its last line's JSON."""
    extra = {"TORCHINDUCTOR_CACHE_DIR": str(cache_dir), **(env or {})}
    if pythonpath:
        extra["PYTHONPATH"] = str(pythonpath)
    proc = run([python, *args], env=extra, cwd=cache_dir.parent)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def inference_warm(result: dict) -> bool:
    """The sample's compiled inference warm: served untraced from its shipped Dynamo cache entry
    (nothing traced), or traced with its graph a hit (where the entry's guards stop it: another
    thread count than the kernels allow, a set built without the second pass)."""
    traced = result.get("first_predict_phases", {}).get("frames", 1)
    return traced == 0 or result["aot_autograd"].get("autograd_cache_hit", 0) >= 1


def run_sample(python: Path, cache_dir: Path, env=None, pythonpath: Path | None = None) -> dict:
    """`python -m sample_pkg --json` in a fresh process with ``cache_dir`` as Inductor's cache."""
    return run_fresh(python, ["-m", "sample_pkg", "--json"], cache_dir, env, pythonpath)


ONE_FUNCTION = "torch.compile(torch.sin)(torch.ones(4))"

# `import sample_pkg`, then ONE_FUNCTION: the fields of run_sample's result that a warm check reads.
RUN_ONE_FUNCTION = f"""
import json, pathlib, torch
from torch._dynamo.utils import counters
from torch._inductor.runtime.cache_dir_utils import cache_dir
import sample_pkg
def kernels():
    return sum(1 for _ in pathlib.Path(cache_dir()).rglob("*.so"))
before = kernels()
{ONE_FUNCTION}
status = sample_pkg.precompile_status
print(json.dumps({{"precompiled": status.loaded, "precompile_reason": status.reason,
                  "aot_autograd": dict(counters["aot_autograd"]), "kernels_compiled": kernels() - before}}))
"""


def one_function_workload() -> str:
    """The sample's precompile.py made to compile ONE_FUNCTION only: a build of it costs a third of
    the sample's. For a frontend's own warm check where the sample's whole workload is already
    shown warm through the same kind of build (an isolated pip build: test_install_flow's pip test)."""
    return f"import torch\n\n\ndef workload():\n    {ONE_FUNCTION}\n"


def run_one_function(python: Path, cache_dir: Path, env=None, pythonpath: Path | None = None) -> dict:
    """RUN_ONE_FUNCTION in a fresh process with ``cache_dir`` as Inductor's cache."""
    return run_fresh(python, ["-c", RUN_ONE_FUNCTION], cache_dir, env, pythonpath)


def run_step_pkg(python: Path, cache_dir: Path, env=None, pythonpath: Path | None = None) -> dict:
    """`python -m step_pkg` in a fresh process with ``cache_dir`` as Inductor's cache."""
    return run_fresh(python, ["-m", "step_pkg"], cache_dir, env, pythonpath)


@pytest.fixture(scope="session")
def env_here() -> dict:
    from hatch_precompile.run.sets import verdict

    return verdict.here().env  # imports torch once: the key is compared field by field


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(directory))
    for name in list(os.environ):
        if name.startswith("PRECOMPILE") or name == "HATCH_PRECOMPILE_BUILDING":
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    from hatch_precompile.run import load_caches

    # Sets an earlier test loaded in this worker would follow this test's cache dir (load() installs
    # every loaded set where torch now reads): each test sees only its own.
    monkeypatch.setattr(load_caches, "_installed", {})
    return directory


@pytest.fixture(scope="session")
def links(tmp_path_factory, hp_dist) -> Path:
    """A find-links dir with all an isolated build needs but torch, so no frontend goes online:
    hatch-precompile's wheel, hatchling and its dependencies."""
    def fill(out: Path) -> None:
        for wheel in hp_dist.glob("*.whl"):
            shutil.copy(wheel, out)
        # hatch-precompile's own wheel brings its dependencies (whatever they are) along; the hook's
        # dependencies() asks for the publishing tools too.
        from hatch_precompile.builder.sets.elf import PUBLISH_REQUIREMENTS

        run([sys.executable, "-m", "pip", "download", "-q", "-d", out, "hatchling", *PUBLISH_REQUIREMENTS,
             *out.glob("hatch_precompile-*.whl")])

    return built_once(tmp_path_factory, "links", fill)


@pytest.fixture(scope="session")
def hp_dist(tmp_path_factory) -> Path:
    """hatch-precompile's own wheel, for venvs and isolated builds."""
    return built_once(tmp_path_factory, "hp-dist",
                      lambda out: run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", out, ROOT]))


@pytest.fixture(scope="session")
def precompiled_build(tmp_path_factory) -> Path:
    """sample_pkg built with precompilation in this (the test) environment, on a CI runner as wheels
    are (CI=true, a GitHub Actions job), with torch's structured trace on, as a package's CI keeps
    it: every test that runs the wheel shows that a traced build ships warm artifacts. Every test
    that runs it does so without CI, as users' machines do. The dir holds the wheel (dist/), the
    build's output (build.log), the temp dir it ran with (tmp/) and the trace (torch-trace/)."""
    def build(out: Path) -> None:
        (out / "tmp").mkdir()
        env = {"CI": "true", "GITHUB_ACTIONS": "true", "TMPDIR": str(out / "tmp"), "HATCH_PRECOMPILE_NO_STEPS": "0",
               "HATCH_PRECOMPILE_NO_DYNAMO_CACHE": "0",
               "HATCH_PRECOMPILE_TORCH_TRACE": str(out / "torch-trace"), "HATCH_PRECOMPILE_HEARTBEAT": "5"}
        proc, _ = build_wheel(copy_project(out / "src" / "sample_pkg"), out / "dist", env=env)
        (out / "build.log").write_text(proc.stdout)

    return built_once(tmp_path_factory, "precompiled", build)


@pytest.fixture(scope="session")
def build_tmpdir(precompiled_build) -> Path:
    """The temp dir (TMPDIR) the precompiled wheel's build ran with: what the build left there."""
    return precompiled_build / "tmp"


@pytest.fixture(scope="session")
def precompiled_wheel(precompiled_build) -> tuple[Path, str]:
    """The precompiled sample wheel and its build's output."""
    (wheel,) = (precompiled_build / "dist").glob("*.whl")
    return wheel, (precompiled_build / "build.log").read_text()


@pytest.fixture(scope="session")
def step_wheel(tmp_path_factory) -> Path:
    """tests/step_pkg built in this environment: its inference step exported, its training steps
    captured where this torch can (2.14+)."""
    def build(out: Path) -> None:
        build_wheel(copy_project(out / "src" / "step_pkg", STEP_PKG), out / "dist", env={"HATCH_PRECOMPILE_NO_STEPS": "0"})

    (wheel,) = (built_once(tmp_path_factory, "step", build) / "dist").glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def step_site(step_wheel, tmp_path_factory) -> Path:
    """The step_pkg wheel unpacked: put it on PYTHONPATH to import the package as installed."""
    return unpack(step_wheel, tmp_path_factory.mktemp("step-site"))


@pytest.fixture(scope="session")
def serve_site(tmp_path_factory) -> Path:
    """tests/serve_pkg built once (a BERT and a BatchNorm convnet, exported) and unpacked: put it on
    PYTHONPATH to import the package as installed."""
    def build(out: Path) -> None:
        build_wheel(copy_project(out / "src" / "serve_pkg", SERVE_PKG), out / "dist",
                    env={"HATCH_PRECOMPILE_NO_STEPS": "0"})
        (wheel,) = (out / "dist").glob("*.whl")
        unpack(wheel, out / "site")

    return built_once(tmp_path_factory, "serve", build) / "site"


@pytest.fixture(scope="session")
def runtime_python(tmp_path_factory, hp_dist, precompiled_wheel) -> Path:
    """A fresh venv (torch at another path than the builder's) with the precompiled wheel. One for
    both workers: no test writes into it (they install with --target, and preferences and warm
    caches go to their own dirs); notorch_python and test_install_flow's target are changed by
    their tests, so each worker makes its own."""
    def install(out: Path) -> None:
        python = make_venv(out / "venv")
        hp_wheel = next(hp_dist.glob("*.whl"))
        # torch linked from uv's cache (no test writes into this venv), then the rest with pip: with the
        # publishing tools, as a package author's venv (test_newest_torch_steps bakes from it).
        install_torch(python, TORCH_REQUIREMENT)
        run([python, "-m", "pip", "install", "-q", TORCH_REQUIREMENT, f"{hp_wheel}[publish]", precompiled_wheel[0]])

    return built_once(tmp_path_factory, "runtime", install) / "venv" / "bin" / "python"


@pytest.fixture(scope="session")
def notorch_python(tmp_path_factory, hp_dist) -> Path:
    """A fresh venv with hatchling and hatch-precompile but no torch."""
    python = make_venv(tmp_path_factory.mktemp("notorch") / "venv")
    run([python, "-m", "pip", "install", "-q", "hatchling", "editables", "build", next(hp_dist.glob("*.whl"))])
    assert run([python, "-c", "import torch"], check=False).returncode != 0
    return python


@pytest.fixture(scope="session")
def cold_result(runtime_python, tmp_path_factory) -> dict:
    """The sample's numbers from a cold compile (PRECOMPILE=0, empty cache dir), run once for both
    workers."""
    def compile_cold(out: Path) -> None:
        (out / "cache").mkdir()
        result = run_sample(runtime_python, out / "cache", env={"PRECOMPILE": "0"})
        (out / "result.json").write_text(json.dumps(result))

    return json.loads((built_once(tmp_path_factory, "cold", compile_cold) / "result.json").read_text())
