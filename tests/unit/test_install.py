"""The load side's fault matrix on synthetic artifact sets, in this process, in milliseconds.

Each test ships a small package with a ``_precompiled/`` dir written here (no workload, no
compile), then calls ``load()`` and looks at the cache dir. The real-wheel versions of the
end-to-end cases are in test_faults.py.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
from pathlib import Path

import pytest

from hatch_precompile.errors import PrecompileWarning
from hatch_precompile.protocol import FileEntry, Manifest, sha256
from hatch_precompile.run import load_caches
from hatch_precompile.run.caches import cache_install
from hatch_precompile.run.sets import artifacts, private_dirs

FILES = {
    "inductor/aotautograd/akey/entry": b"aot entry",
    "inductor/fxgraph/fx/fkey/entry": b"fx entry",
    "inductor/ab/cabkernel.main.so": b"\x7fELF kernel",
    "inductor/ab/cabkernel.main.cpp": b"int main() {}",
}
_names = itertools.count()


def ship(tmp_path, monkeypatch, env, files=FILES, manifest: dict | None = None) -> tuple[str, Path]:
    """A package ``fakepkgN`` on sys.path shipping ``files`` as one artifact set; its manifest file."""
    package = f"fakepkg{next(_names)}"
    root = tmp_path / "site" / package
    shipped = root / "_precompiled"
    (shipped / "blobs").mkdir(parents=True)
    for blob in files.values():
        (shipped / "blobs" / sha256(blob)).write_bytes(blob)
    (root / "__init__.py").write_text("")
    data = Manifest(package, env, {p: FileEntry(len(b), sha256(b)) for p, b in files.items()}).to_dict()
    data.update(manifest or {})
    manifest_file = shipped / "sets" / "test-set" / "manifest.json"
    manifest_file.parent.mkdir(parents=True)
    manifest_file.write_text(json.dumps(data))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return package, manifest_file


def blob_of(manifest_file: Path, path: str) -> Path:
    """The blob holding the artifact ``path`` of the set whose manifest is ``manifest_file``."""
    digest = json.loads(manifest_file.read_text())["files"][path]["sha256"]
    return manifest_file.parents[2] / "blobs" / digest


def files_in(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def assert_skipped(package: str, cache: Path, reason: str) -> str:
    with pytest.warns(PrecompileWarning, match=f"not using {package}'s precompiled caches"):
        result = load_caches.load(package)
    assert not result.loaded and result.installed == 0
    assert reason in result.reason, result.reason
    assert files_in(cache) == [], "a skipped load must leave the cache dir untouched"
    return result.reason


def test_installs_every_listed_file_atomically_and_never_twice(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    result = load_caches.load(package)
    assert result.loaded and (result.installed, result.present) == (len(FILES), 0)
    for path, blob in FILES.items():
        assert (cache / path.removeprefix("inductor/")).read_bytes() == blob
    kernel = cache / "ab" / "cabkernel.main.so"
    assert stat.S_IMODE(kernel.stat().st_mode) == 0o755
    assert not [p for p in files_in(cache) if p.name.endswith(".tmp")]
    found = artifacts.find(package)
    assert cache_install.install(found, cache_install.destinations(found, None), cache) == (0, len(FILES))


def test_missing_file(tmp_path, monkeypatch, env_here, cache):
    package, shipped = ship(tmp_path, monkeypatch, env_here)
    blob_of(shipped, "inductor/ab/cabkernel.main.so").unlink()
    assert_skipped(package, cache, "inductor/ab/cabkernel.main.so cannot be read")


def test_truncated_file(tmp_path, monkeypatch, env_here, cache):
    package, shipped = ship(tmp_path, monkeypatch, env_here)
    blob_of(shipped, "inductor/ab/cabkernel.main.so").write_bytes(b"\x7fELF")
    assert_skipped(package, cache, "inductor/ab/cabkernel.main.so does not match its sha256")


def test_altered_file_of_the_same_size_is_refused_before_anything_is_written(tmp_path, monkeypatch, env_here, cache):
    package, shipped = ship(tmp_path, monkeypatch, env_here)
    blob_of(shipped, "inductor/fxgraph/fx/fkey/entry").write_bytes(b"fx entrY")
    assert_skipped(package, cache, "inductor/fxgraph/fx/fkey/entry does not match its sha256")


def test_unlisted_file_is_never_installed(tmp_path, monkeypatch, env_here, cache):
    package, shipped = ship(tmp_path, monkeypatch, env_here)
    planted = b"\x7fELF not ours"
    (shipped.parents[2] / "blobs" / sha256(planted)).write_bytes(planted)  # a blob no manifest lists
    assert load_caches.load(package).loaded
    assert not (cache / "zz").exists()


@pytest.mark.parametrize(
    ("manifest", "reason"),
    [
        ({"format": 99}, "manifest format 99 is not the supported format 3"),
        ({"format": 1}, "manifest format 1 is not the supported format 3 (written by an older hatch-precompile: rebuild"),
        ({"format": 2}, "manifest format 2 is not the supported format 3 (written by an older hatch-precompile: rebuild"),
        ({"settings": {"cpp.threads": 4}}, "asks for the Inductor setting cpp.threads=4, which load() never applies"),
        ({"settings": {"cpp.dynamic_threads": "yes"}}, "asks for the Inductor setting cpp.dynamic_threads='yes'"),
        ({"cpu_features": "avx2"}, "manifest cpu_features is not a list of feature names"),
        ({"cpu_target": "skylake"}, "manifest has an unknown cpu_target 'skylake'"),
        ({"libraries": {"../libc.so.6": {}}}, "manifest libraries is not a map of library names"),
        ({"probes": {"-mavx2": "avx2"}}, "manifest probes is not a map of arch flags to CPU features"),
        ({"files": {"../../../evil.so": {"size": 1, "sha256": "0" * 64}}}, "manifest names a path outside its directory"),
        ({"files": {"/etc/passwd": {"size": 1, "sha256": "0" * 64}}}, "manifest names a path outside its directory"),
        ({"files": {"inductor/../../evil": {"size": 1, "sha256": "0" * 64}}}, "outside its directory"),
        ({"env": None}, "manifest has no environment key"),
        ({"torchscript": {"m": "torchscript/m.pt"}}, "names a TorchScript module that is not in its file list"),
    ],
)
def test_untrustworthy_manifest(tmp_path, monkeypatch, env_here, cache, manifest, reason):
    package, _ = ship(tmp_path, monkeypatch, env_here, manifest=manifest)
    assert_skipped(package, cache, reason)


def test_unparsable_manifest(tmp_path, monkeypatch, env_here, cache):
    package, shipped = ship(tmp_path, monkeypatch, env_here)
    shipped.write_text("{not json")
    assert_skipped(package, cache, "manifest.json does not parse")


def test_environment_mismatch_names_the_first_differing_field(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, dict(env_here, torch="2.7.0+cpu", cpu_capability="other"))
    reason = assert_skipped(package, cache, "built for torch='2.7.0+cpu', this environment has torch=")
    assert reason.endswith(f"or run `hatch-precompile warm {package}`")


def test_symlink_out_of_the_artifact_dir(tmp_path, monkeypatch, env_here, cache):
    package, shipped = ship(tmp_path, monkeypatch, env_here)
    victim = blob_of(shipped, "inductor/ab/cabkernel.main.so")
    outside = tmp_path / "outside.so"
    outside.write_bytes(victim.read_bytes())  # same bytes: only the symlink itself can be refused
    victim.unlink()
    victim.symlink_to(outside)
    assert_skipped(package, cache, "inductor/ab/cabkernel.main.so is a symlink")


def assert_foreign_entry_kept(package, cache):
    """A whole entry already in the cache dir (another process was first: the same size) stays as
    it is; the rest of the set is installed."""
    (cache / "ab").mkdir(parents=True)
    first = b"x" * len(FILES["inductor/ab/cabkernel.main.so"])
    (cache / "ab" / "cabkernel.main.so").write_bytes(first)
    result = load_caches.load(package)
    assert result.loaded and (result.installed, result.present) == (len(FILES) - 1, 1)
    assert (cache / "ab" / "cabkernel.main.so").read_bytes() == first


def test_existing_entries_are_never_overwritten(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    assert_foreign_entry_kept(package, cache)


@pytest.mark.parametrize("left", [b"", b"\x7fELF"], ids=["empty", "truncated"])
def test_a_file_cut_short_is_replaced_whole(tmp_path, monkeypatch, env_here, cache, left):
    """What a power loss leaves (a file of the right name, empty or cut short) is not counted as
    present: it is replaced by a rename, so no process ever sees it half written."""
    package, _ = ship(tmp_path, monkeypatch, env_here)
    (cache / "ab").mkdir(parents=True)
    kernel = cache / "ab" / "cabkernel.main.so"
    kernel.write_bytes(left)
    result = load_caches.load(package)
    assert result.loaded and (result.installed, result.present) == (len(FILES), 0)
    assert kernel.read_bytes() == FILES["inductor/ab/cabkernel.main.so"]
    assert stat.S_IMODE(kernel.stat().st_mode) == 0o755
    assert not [p for p in files_in(cache) if p.name.endswith(".tmp")]


def test_planted_symlink_in_the_cache_dir_is_not_followed(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    elsewhere = plant_link(cache / "aotautograd", tmp_path)
    with pytest.warns(PrecompileWarning):
        result = load_caches.load(package)
    assert not result.loaded and "aotautograd in the Inductor cache dir is a symlink" in result.reason
    assert files_in(elsewhere) == []


def plant_link(path: Path, tmp_path: Path) -> Path:
    """Make ``path`` (inside the cache dir) a symlink to an empty dir elsewhere; that dir."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(elsewhere)
    return elsewhere


def test_uncreatable_cache_dir(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(PrecompileWarning):
        result = load_caches.load(package)
    assert not result.loaded and result.reason.startswith("cannot create the Inductor cache dir")


def test_switched_off_loads_nothing_and_says_why(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    monkeypatch.setenv("PRECOMPILE", "0")
    result = load_caches.load(package)
    assert not result.loaded and result.reason == "disabled by PRECOMPILE=0"
    assert files_in(cache) == []


def test_an_invalid_switch_value_is_said_once_and_loads_nothing(tmp_path, monkeypatch, env_here, cache):
    monkeypatch.setenv("PRECOMPILE", "maybe")
    monkeypatch.setattr(load_caches, "_warned", set())
    first, _ = ship(tmp_path, monkeypatch, env_here)
    second, _ = ship(tmp_path, monkeypatch, env_here)
    with pytest.warns(PrecompileWarning) as said:
        results = [load_caches.load(first), load_caches.load(second)]
    assert [str(w.message) for w in said] == [
        "hatch-precompile: PRECOMPILE='maybe' is not a valid switch value: use one of 1, on, true, yes or 0, false, "
        "no, off; precompiled caches are not loaded while it is set so"]
    assert not any(r.loaded for r in results) and files_in(cache) == []


@pytest.mark.parametrize(("value", "loads"), [("1", False), ("yes", False), ("0", True), ("false", True), ("", True)])
def test_only_a_building_flag_set_on_keeps_loading_off(tmp_path, monkeypatch, env_here, cache, value, loads):
    monkeypatch.setenv("HATCH_PRECOMPILE_BUILDING", value)
    package, _ = ship(tmp_path, monkeypatch, env_here)
    result = load_caches.load(package)
    assert result.loaded is loads and (loads or result.reason == "a precompile workload is running")


# -- the cache-dir boundary ------------------------------------------------------------------------

needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
OTHER_UID = 54321


@needs_root
def test_cache_dir_owned_by_another_user_is_refused(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    cache.mkdir(mode=0o700)
    os.chown(cache, OTHER_UID, OTHER_UID)
    assert_skipped(package, cache, f"refusing the Inductor cache dir {cache}: {cache} is owned by uid {OTHER_UID}, "
                   "not by this user (uid 0 (root)); torch itself still compiles into it and loads what it finds "
                   "there: set TORCHINDUCTOR_CACHE_DIR to a dir of your own")


@pytest.mark.parametrize("mode", [0o770, 0o775, 0o777, 0o2775])
def test_a_cache_dir_of_ours_that_others_may_write_is_tightened_and_used(tmp_path, monkeypatch, env_here, cache, mode):
    """As torch makes it under umask 002 (0775): nobody else can have put anything there that the
    owner checks of each entry would not catch, so it is made 0700 and used, without a word."""
    package, _ = ship(tmp_path, monkeypatch, env_here)
    cache.mkdir()
    cache.chmod(mode)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = load_caches.load(package)
    assert result.loaded and result.installed == len(FILES)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


def test_world_writable_dir_on_the_way_is_refused_unless_sticky(tmp_path, monkeypatch, env_here, cache):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(shared / "cache"))
    package, _ = ship(tmp_path, monkeypatch, env_here)
    assert_skipped(package, shared / "cache", f"{shared} is writable by all users (mode 0777) and not sticky, so another "
                   "account can replace what is in it; torch itself still compiles into it")
    shared.chmod(0o1777)  # sticky, like /tmp: others cannot replace what is ours in it
    package, _ = ship(tmp_path, monkeypatch, env_here)
    assert load_caches.load(package).loaded


@needs_root
def test_symlink_on_the_way_owned_by_another_user_is_refused(tmp_path, monkeypatch, env_here, cache):
    """The default /tmp/torchinductor_<user>, planted by someone else as a link to elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache.symlink_to(elsewhere)
    os.lchown(cache, OTHER_UID, OTHER_UID)
    package, _ = ship(tmp_path, monkeypatch, env_here)
    with pytest.warns(PrecompileWarning):
        result = load_caches.load(package)
    assert not result.loaded and f"{cache} is a symlink owned by uid {OTHER_UID}" in result.reason
    assert files_in(elsewhere) == []


def test_missing_dirs_are_created_private(tmp_path, monkeypatch, env_here, cache):
    deep = tmp_path / "new" / "deeper" / "cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(deep))
    package, _ = ship(tmp_path, monkeypatch, env_here)
    assert load_caches.load(package).loaded
    for directory in (tmp_path / "new", tmp_path / "new" / "deeper", deep, deep / "aotautograd"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


def test_a_symlink_met_part_way_undoes_what_was_linked(tmp_path, monkeypatch, env_here, cache):
    """The destinations are written in order; the last one's dir is a planted symlink."""
    files = {f"inductor/aa/file{n:02}": b"x" * n for n in range(20)} | {"inductor/zz/last": b"last"}
    package, _ = ship(tmp_path, monkeypatch, env_here, files=files)
    elsewhere = plant_link(cache / "zz", tmp_path)
    with pytest.warns(PrecompileWarning):
        result = load_caches.load(package)
    assert not result.loaded and "zz in the Inductor cache dir is a symlink or not a directory" in result.reason
    assert files_in(cache) == [] and not (cache / "aa").exists(), "the 20 files linked before are removed"
    assert files_in(elsewhere) == []


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
sys.path.insert(0, sys.argv[1])
from hatch_precompile.errors import Skip
from hatch_precompile.run.sets import artifacts, private_dirs
from hatch_precompile.run.caches import cache_install
if sys.argv[4] == "no-hard-links":  # as on vfat or exFAT: no link(), and no renameat2 either
    def no_hard_links(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")
    import os
    os.link, private_dirs.renameat2_function = no_hard_links, lambda: None
found = artifacts.find(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # the first big file fails part-way
try:
    cache_install.install(found, cache_install.destinations(found, None), Path(sys.argv[3]))
except Skip as skip:
    print(skip)
"""


@pytest.mark.parametrize("links", ["hard-links", "no-hard-links"])
def test_a_write_that_fails_part_way_leaves_nothing(tmp_path, monkeypatch, env_here, cache, links):
    """A real kernel error (EFBIG from a file-size limit, as ENOSPC from a full disk) at file 6; also
    where the last-resort copy is used (before, it wrote under the final name, and left half of
    ``bb/big`` there)."""
    files = {f"inductor/aa/small{n}": b"x" * 100 for n in range(5)} | {"inductor/bb/big": b"y" * 10000}
    package, _ = ship(tmp_path, monkeypatch, env_here, files=files)
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    proc = subprocess.run([sys.executable, "-c", FULL_DISK, str(Path(load_caches.__file__).parents[2]), package, cache,
                           links], env=env, capture_output=True, text=True, check=True)
    assert "cannot write bb/big into the Inductor cache dir" in proc.stdout and "File too large" in proc.stdout
    assert files_in(cache) == [] and not (cache / "aa").exists() and not (cache / "bb").exists()


def test_temp_names_are_unpredictable(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    opened: list[str] = []
    recording = [True]

    def audit(event: str, args: tuple) -> None:
        if recording[0] and event == "open" and isinstance(args[0], str) and args[0].endswith(".tmp"):
            opened.append(args[0])

    import sys

    sys.addaudithook(audit)  # cannot be removed: it stops recording at the end of this test
    try:
        assert load_caches.load(package).loaded
    finally:
        recording[0] = False
    import re

    assert len(opened) == len(FILES) == len(set(opened))
    assert all(re.fullmatch(r"\.hatch-precompile-[0-9a-f]{16}\.tmp", name) for name in opened), opened


@pytest.mark.parametrize("rename_noreplace", [True, False], ids=["renameat2", "rename-where-none-is"])
def test_without_hard_links_an_entry_is_still_never_replaced(tmp_path, monkeypatch, env_here, cache, rename_noreplace):
    """link() fails as on vfat (EPERM); such a filesystem cannot be mounted here, so link is
    made to fail. renameat2(RENAME_NOREPLACE) is used where Linux has it, else a whole temp file is
    renamed into place where no entry is."""
    import errno

    def no_hard_links(*args, **kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_hard_links)
    if not rename_noreplace:
        monkeypatch.setattr(private_dirs, "renameat2_function", lambda: None)
    package, _ = ship(tmp_path, monkeypatch, env_here)
    assert_foreign_entry_kept(package, cache)
    assert (cache / "aotautograd" / "akey" / "entry").read_bytes() == FILES["inductor/aotautograd/akey/entry"]
    assert not [p for p in files_in(cache) if p.name.endswith(".tmp")]


@needs_root
def test_without_hard_links_a_nearly_full_disk_never_shows_half_a_file(tmp_path, monkeypatch, env_here, cache):
    """A 64 KiB tmpfs, a 40 KB file, link() failing as on vfat and no renameat2: the temp file fits,
    a second copy would not. The last resort renames the temp file into place (before, it copied it
    under the final name, ran out of space and left 24576 of the 40000 bytes there, for good)."""
    import errno
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)")
    try:
        def no_hard_links(*args, **kwargs):
            raise PermissionError(errno.EPERM, "Operation not permitted")

        monkeypatch.setattr(os, "link", no_hard_links)
        monkeypatch.setattr(private_dirs, "renameat2_function", lambda: None)
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(mount / "cache"))  # the fixture's dir, on the tmpfs
        big = {"inductor/bb/big": b"y" * 40_000}
        package, _ = ship(tmp_path, monkeypatch, env_here, files=big)
        assert load_caches.load(package).loaded
        assert [(p.name, p.stat().st_size) for p in files_in(mount / "cache")] == [("big", 40_000)]
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_python_abi_is_part_of_the_key(tmp_path, monkeypatch, env_here, cache):
    import sysconfig

    assert env_here["python_abi"] == sysconfig.get_config_var("SOABI")
    package, _ = ship(tmp_path, monkeypatch, dict(env_here, python_abi="cpython-313t-x86_64-linux-gnu"))
    assert_skipped(package, cache, "built for python_abi='cpython-313t-x86_64-linux-gnu', this environment has")


def test_relative_cache_dir_is_made_absolute_where_torch_reads_it(tmp_path, monkeypatch, env_here, cache):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "relative-cache")
    package, _ = ship(tmp_path, monkeypatch, env_here)
    result = load_caches.load(package)
    assert result.loaded and result.cache_dir == str(tmp_path / "relative-cache")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "relative-cache")
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    monkeypatch.chdir(cache.parent)  # torch now reads the same dir from anywhere
    assert cache_dir() == str(tmp_path / "relative-cache")


NO_USER = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import torch
from torch._inductor.runtime.cache_dir_utils import default_cache_dir
from hatch_precompile.errors import Skip
from hatch_precompile.run.caches import cache_install
for name in ("LOGNAME", "USER", "LNAME", "USERNAME", "TORCHINDUCTOR_CACHE_DIR"):
    os.environ.pop(name, None)
os.setuid(54321)  # a uid with no passwd entry, as in containers run with --user
found = [default_cache_dir(), str(cache_install.inductor_cache_dir())]
torch.__version__ = "2.7.1"  # before 2.13, torch's own default_cache_dir() raises KeyError here
try:
    found.append(str(cache_install.inductor_cache_dir()))
except Skip as skip:
    found.append(str(skip))
print(json.dumps(found))
"""


@needs_root
def test_a_uid_without_a_name_gets_the_dir_torch_uses_or_a_clear_skip_where_torch_fails():
    import json
    import subprocess
    import sys
    import tempfile

    proc = subprocess.run([sys.executable, "-c", NO_USER, str(Path(load_caches.__file__).parents[2])],
                          capture_output=True, text=True, check=True)
    by_torch, ours, older = json.loads(proc.stdout.splitlines()[-1])
    assert ours == by_torch == os.path.join(tempfile.gettempdir(), "torchinductor_uid_54321")
    assert older.startswith("torch 2.7 cannot name its default cache dir for uid 54321, which has no user name "
                            "(getpass.getuser() failed: KeyError("), older
    assert older.endswith("and will fail at the first compile: set TORCHINDUCTOR_CACHE_DIR"), older
