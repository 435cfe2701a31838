"""Warm for every account, safe from every other, in fresh processes: a cache dir torch made under
umask 002, a uid with no passwd entry, a per-user store another uid planted.

The suite runs as root here; the tests that need another uid switch to it in the child (os.setuid)
and are skipped where the suite does not run as root.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import inference_warm, run, set_manifest, unpack

pytestmark = pytest.mark.slow  # runs torch in fresh processes

needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="switching to another uid (and chown) needs root")
NO_NAME_UID = 4242  # no passwd entry: `docker run --user 4242`, OpenShift's arbitrary uids
OTHER_UID = 4343
UMASK_002 = ["sh", "-c", 'umask 002 && exec "$@"', "sh"]  # the login default where each user has a group
# Switch to a uid (and its own gid, no other group), then run the command: a container's process.
AS_UID = ("import os, sys; uid = int(sys.argv[1]); os.setgroups([]); os.setgid(uid); os.setuid(uid); "
          "os.execv(sys.argv[2], sys.argv[2:])")


def sample_json(proc) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_warm(result: dict) -> None:
    assert result["precompiled"] and result["precompile_reason"] == "installed", result["precompile_reason"]
    assert inference_warm(result) and not result["aot_autograd"].get("autograd_cache_miss")
    assert result["kernels_compiled"] == 0


def test_a_cache_dir_torch_made_under_umask_002_is_tightened_and_warm(runtime_python, tmp_path):
    """The user compiled something of their own first: torch made /tmp/torchinductor_<user> 0775.
    The precompiled package's next process is warm in it, and the dir is 0700 from then on."""
    (tmp_path / "tmp").mkdir()
    env = {"TMPDIR": str(tmp_path / "tmp")}  # torch's default dir, no TORCHINDUCTOR_CACHE_DIR
    # A plain compile, without Inductor's ISA probes (11 of its 20 s here): they make nothing it keeps.
    run([*UMASK_002, runtime_python, "-c", "import torch; torch.compile(torch.sin)(torch.ones(4))"],
        env={**env, "TORCHINDUCTOR_VEC_ISA_OK": "0"})
    (made,) = (tmp_path / "tmp").glob("torchinductor_*")
    assert stat.S_IMODE(made.stat().st_mode) == 0o775 and any(made.rglob("*.so"))
    proc = run([*UMASK_002, runtime_python, "-W", "always", "-m", "sample_pkg", "--json"], env=env)
    assert_warm(sample_json(proc))
    assert "PrecompileWarning" not in proc.stdout  # nothing for the user to act on
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


@pytest.fixture
def any_uid_python(runtime_python):
    """runtime_python's packages in a venv any uid can run: on /usr/bin/python3, in a world-readable
    dir (pytest's own temp root is 0700). Its site-packages are hard links to runtime_python's files
    (~2 s, where installing torch again takes ~30 s); nothing writes to them."""
    system = Path("/usr/bin/python3")
    if not system.exists():
        pytest.skip("needs /usr/bin/python3: the runtime venv's own interpreter is under root's home")
    root = Path(tempfile.mkdtemp(prefix="hatch-precompile-any-uid-"))
    try:
        root.chmod(0o755)
        run([system, "-m", "venv", "--without-pip", root / "venv"])
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        site = root / "venv" / "lib" / version / "site-packages"
        shutil.rmtree(site)
        run(["cp", "-al", runtime_python.parent.parent / "lib" / version / "site-packages", site])
        (root / "tmp").mkdir(mode=0o1777)
        (root / "tmp").chmod(0o1777)  # as /tmp: sticky, writable by all
        yield root / "venv" / "bin" / "python"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@needs_root
def test_a_uid_without_a_passwd_entry_is_warm_in_the_dir_torch_uses(any_uid_python, tmp_path):
    """`docker run --user 4242`: no passwd entry, no USER, HOME=/ (no per-user cache to write).
    torch 2.13+ uses /tmp/torchinductor_uid_4242 there, and so does load()."""
    temp = any_uid_python.parents[2] / "tmp"
    nameless = {name: "" for name in ("USER", "LOGNAME", "LNAME", "USERNAME")}
    env = {**nameless, "HOME": "/", "XDG_CACHE_HOME": "", "TMPDIR": str(temp)}
    proc = run([sys.executable, "-c", AS_UID, NO_NAME_UID, any_uid_python, "-W", "always", "-m", "sample_pkg",
                "--json"], env=env, cwd=temp)
    assert_warm(sample_json(proc))
    assert "PrecompileWarning" not in proc.stdout, proc.stdout
    used = temp / f"torchinductor_uid_{NO_NAME_UID}"
    info = used.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (NO_NAME_UID, 0o700) and any(used.rglob("*.main.so"))


@needs_root
def test_a_store_another_uid_planted_is_not_loaded_and_said_in_one_line(runtime_python, precompiled_wheel, tmp_path):
    """A set as `warm` stores it (this environment's own build), the shipped one made not to fit;
    then the store is another uid's and writable by all, as where the cache home is shared."""
    site = unpack(precompiled_wheel[0], tmp_path / "site")
    data = json.loads(set_manifest(site).read_text())
    xdg = tmp_path / "xdg"
    env = {"PYTHONPATH": str(site), "XDG_CACHE_HOME": str(xdg), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    code = ("import json, sys; from hatch_precompile.run.sets import usercache; "
            "print(usercache.env_dir('sample_pkg', json.loads(sys.argv[1])))")
    entry = Path(run([runtime_python, "-c", code, json.dumps(data["env"])], env=env).stdout.strip().splitlines()[-1])
    shutil.copytree(site / "sample_pkg" / "_precompiled", entry)
    data["env"]["torch"] = "2.7.0+cpu"
    set_manifest(site).write_text(json.dumps(data))
    store = xdg / "hatch-precompile"
    for path in (store, *store.rglob("*")):
        os.chown(path, OTHER_UID, OTHER_UID, follow_symlinks=False)
        path.chmod(0o777 if path.is_dir() else 0o666)

    status = "import json, sample_pkg; s = sample_pkg.precompile_status; print(json.dumps([s.loaded, s.reason]))"
    proc = run([runtime_python, "-W", "always", "-c", status], env=env)
    loaded, reason = json.loads(proc.stdout.splitlines()[-1])
    assert not loaded
    assert reason.startswith("built for torch='2.7.0+cpu'"), reason
    assert (f"; ignoring what `hatch-precompile warm` stored in {entry}: {store} is owned by uid {OTHER_UID}, not by "
            "this user (uid 0 (root)); remove it, or set XDG_CACHE_HOME to a dir of your own") in reason
    assert proc.stdout.count("PrecompileWarning") == 1
    cache = tmp_path / "cache"
    assert not cache.exists() or not any(cache.rglob("*.so"))
    assert stat.S_IMODE(store.stat().st_mode) == 0o777  # another's store is left as it is
