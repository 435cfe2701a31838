"""What another account wrote is never used: the per-user store of `warm` and the memos, in-process.

A warmed set is made here by moving a synthetic shipped set (test_install.ship) into the store,
then ``load()`` is asked for it; the memos are read and written through their own functions.
"""

from __future__ import annotations

import os
import shutil
import stat
import warnings
from pathlib import Path

import pytest

from hatch_precompile.errors import PrecompileWarning, Untrusted
from hatch_precompile.run import load_caches
from hatch_precompile.run.caches import isa_probes
from hatch_precompile.run.sets import memos, private_dirs, usercache
from unit.test_install import FILES, OTHER_UID, assert_skipped, files_in, needs_root, ship


def warmed(tmp_path, monkeypatch, env) -> tuple[str, Path]:
    """A package that ships nothing, and a set `warm` stored for it in this environment; its dir."""
    package, manifest_file = ship(tmp_path, monkeypatch, env)
    entry = usercache.env_dir(package, env)
    assert entry is not None
    entry.parent.mkdir(parents=True, mode=0o700)
    entry.parent.parent.chmod(0o700)
    shutil.move(str(manifest_file.parents[2]), entry)  # <package>/_precompiled: nothing shipped now
    return package, entry


def modes(entry: Path) -> set[int]:
    return {stat.S_IMODE(p.stat().st_mode) for p in (entry, *entry.rglob("*")) if p.is_dir()}


def test_a_set_warm_stored_is_used(tmp_path, monkeypatch, env_here, cache):
    package, entry = warmed(tmp_path, monkeypatch, env_here)
    result = load_caches.load(package)
    assert result.loaded and result.reason == f"installed from {entry} (hatch-precompile warm)", result.reason
    assert result.installed == len(FILES)


def test_a_store_of_ours_made_under_umask_002_is_tightened_and_used(tmp_path, monkeypatch, env_here, cache):
    """Its dirs 0775 (the old `warm` made them with the user's umask): nobody else can have put a
    file there that the owner checks would miss, so they become 0700 and the set is used, quietly."""
    package, entry = warmed(tmp_path, monkeypatch, env_here)
    for directory in (entry.parent.parent, entry.parent, entry, *[p for p in entry.rglob("*") if p.is_dir()]):
        directory.chmod(0o775)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_caches.load(package).loaded
    assert modes(entry) == {0o700} and stat.S_IMODE(entry.parent.stat().st_mode) == 0o700


def test_a_stored_file_others_may_write_is_not_read(tmp_path, monkeypatch, env_here, cache):
    package, entry = warmed(tmp_path, monkeypatch, env_here)
    manifest = entry / "sets" / "test-set" / "manifest.json"
    manifest.chmod(0o664)
    assert_skipped(package, cache, f"ignoring what `hatch-precompile warm` stored in {entry}: {manifest} is "
                                   "writable by its group (mode 0664); remove it, or set XDG_CACHE_HOME")


@needs_root
def test_a_store_another_account_wrote_is_not_read(tmp_path, monkeypatch, env_here, cache):
    """As planted where the cache home is shared: every dir and file another uid's, writable by all."""
    package, entry = warmed(tmp_path, monkeypatch, env_here)
    store = entry.parent.parent
    for path in (store, *store.rglob("*")):
        os.chown(path, OTHER_UID, OTHER_UID)
        path.chmod(0o777 if path.is_dir() else 0o666)
    reason = assert_skipped(package, cache, f"ignoring what `hatch-precompile warm` stored in {entry}: {store} is "
                                            f"owned by uid {OTHER_UID}, not by this user (uid 0 (root))")
    assert "\n" not in reason
    assert stat.S_IMODE(store.stat().st_mode) == 0o777  # another's: not ours to change


@needs_root
def test_the_tools_list_no_entry_of_a_store_another_account_owns(tmp_path, monkeypatch, env_here, cache):
    from hatch_precompile.tools import warm

    package, entry = warmed(tmp_path, monkeypatch, env_here)
    assert usercache.entries(package) == [entry] and [p for p, _, _ in warm.stored()] == [entry.parent.name]
    os.chown(entry.parent, OTHER_UID, OTHER_UID)
    assert usercache.entries(package) == [] and warm.stored() == []


@pytest.mark.parametrize("where", ["entry", "blob"])
def test_a_symlink_in_the_store_is_not_followed(tmp_path, monkeypatch, env_here, cache, where):
    package, entry = warmed(tmp_path, monkeypatch, env_here)
    moved = entry if where == "entry" else next((entry / "blobs").iterdir())
    moved.rename(tmp_path / "elsewhere")
    moved.symlink_to(tmp_path / "elsewhere")
    assert_skipped(package, cache, f"{entry} is a symlink or not a directory" if where == "entry" else
                   "cannot be read: [Errno 40] Too many levels of symbolic links")


# -- memos -------------------------------------------------------------------------------------------


def test_memos_are_written_whole_private_and_never_through_a_symlink(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    base = tmp_path / "cache" / "hatch-precompile"
    memos.put(memos.COMPILERS, "k0", "g++ 11")
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (base / memos.COMPILERS / "k1").symlink_to(victim)
    assert memos.get(memos.COMPILERS, "k1", memos.printable_line) is None
    memos.put(memos.COMPILERS, "k1", "g++ 12")
    assert victim.read_text() == "untouched" and not (base / memos.COMPILERS / "k1").is_symlink()
    assert memos.get(memos.COMPILERS, "k1", memos.printable_line) == "g++ 12"
    assert sorted(p.name for p in (base / memos.COMPILERS).iterdir()) == ["k0", "k1"]  # no temp file left
    assert stat.S_IMODE((base / memos.COMPILERS / "k1").stat().st_mode) == 0o600
    assert {stat.S_IMODE(p.stat().st_mode) for p in (base, base / memos.COMPILERS)} == {0o700}


class _Isa:
    """A VecISA as the probe's hook sees it: its flags."""

    def build_arch_flags(self) -> str:
        return "-mavx2 -mfma"


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="the probe memo is keyed by /proc/cpuinfo's flags")
def test_an_empty_isa_probe_memo_does_not_skip_torchs_probe(tmp_path, monkeypatch):
    """The old marker was an empty file, and any empty file there skipped the probe (a planted one
    too): now only a memo naming its key and `passed`, written after a probe passed, does."""
    from hatch_precompile.run.torch_internals import patching

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(isa_probes, "_probed", {})
    monkeypatch.setattr(isa_probes.settings, "cpp_compiler", lambda: "sh")  # a file on every PATH
    monkeypatch.setattr(isa_probes.environment_key, "remembered_compiler_version", lambda command: "g++ 12")
    arguments = {"self": _Isa(), "code": "int main() {}"}
    assert isa_probes._known_probe(arguments) is patching.PASS
    isa_probes._note_probe(arguments, True)
    (memo,) = (tmp_path / "cache" / "hatch-precompile" / memos.ISA_PROBES).iterdir()
    assert memo.read_text() == f"{memo.name}\npassed\n"
    assert isa_probes._known_probe(arguments) is True
    for other in ({"code": "int main() { return 1; }"}, {"self": type("Isa", (), {"build_arch_flags": lambda s: "-mavx2"})()}):
        assert isa_probes._known_probe({**arguments, **other}) is patching.PASS, other  # another probe
    monkeypatch.setattr(isa_probes.environment_key, "remembered_compiler_version", lambda command: "g++ 13")
    assert isa_probes._known_probe(arguments) is patching.PASS, "another compiler release"
    monkeypatch.setattr(isa_probes.environment_key, "remembered_compiler_version", lambda command: "g++ 12")
    for planted in ("", "\n", "passed", f"{memo.name}\nfailed\n", "another\npassed\n"):
        memo.write_text(planted)
        assert isa_probes._known_probe(arguments) is patching.PASS, planted
    isa_probes._note_probe(arguments, False)  # a failed probe is never remembered
    assert isa_probes._known_probe(arguments) is patching.PASS
    isa_probes._note_probe(arguments, True)  # and the next pass writes it anew
    assert isa_probes._known_probe(arguments) is True
    assert isa_probes.passed_probes() == ["-mavx2 -mfma"]  # a remembered pass is recorded as a pass
    monkeypatch.setattr(isa_probes.settings, "cpp_compiler", lambda: (_ for _ in ()).throw(RuntimeError("moved")))
    assert isa_probes._known_probe(arguments) is patching.PASS, "no compiler to key on: probed as usual"


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="the store is keyed by /proc/cpuinfo's flags")
def test_probe_libraries_a_build_kept_are_put_where_torch_looks_in_the_next_builds_cache_dir(tmp_path, monkeypatch):
    """A build that answered its probes from the memo compiled none; it still ships the libraries,
    which the build before it kept: the probes' sources and libraries only, by torch's key."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(isa_probes.settings, "cpp_compiler", lambda: "sh")
    monkeypatch.setattr(isa_probes.environment_key, "remembered_compiler_version", lambda command: "g++ 12")
    monkeypatch.setattr(isa_probes, "_sources", {"int probe() {}"})
    first = tmp_path / "first-build-cache"
    for name, text in (("cabc", "int probe() {}"), ("cdef", "int kernel() {}"), ("cfailed", "int probe() {}")):
        (first / name[1:3]).mkdir(parents=True)
        (first / name[1:3] / f"{name}.cpp").write_text(text)
    for name in ("cabc", "cdef"):  # a probe that did not compile has no library
        (first / name[1:3] / f"{name}.so").write_bytes(b"\x7fELF " + name.encode())
    isa_probes.keep_libraries(first)
    second = tmp_path / "second-build-cache"
    isa_probes.seed_libraries(second)
    assert sorted(str(p.relative_to(second)) for p in second.rglob("*") if p.is_file()) == ["ab/cabc.cpp", "ab/cabc.so"]
    assert (second / "ab" / "cabc.so").read_bytes() == b"\x7fELF cabc"
    monkeypatch.setattr(isa_probes.environment_key, "remembered_compiler_version", lambda command: "g++ 13")
    other = tmp_path / "another-compilers-cache"
    isa_probes.seed_libraries(other)
    assert not other.exists(), "kept per compiler: another one's build compiles its own"


@needs_root
def test_a_memo_dir_another_account_owns_is_not_used_and_said_once(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    memos.put(memos.COMPILERS, "k1", "g++ 12")
    directory = tmp_path / "cache" / "hatch-precompile" / memos.COMPILERS
    os.chown(directory, OTHER_UID, OTHER_UID)
    os.chown(directory / "k1", OTHER_UID, OTHER_UID)
    monkeypatch.setattr(memos, "_said", set())
    with pytest.warns(PrecompileWarning) as said:
        assert memos.get(memos.COMPILERS, "k1", memos.printable_line) is None
        memos.put(memos.COMPILERS, "k2", "g++ 13")
        assert memos.get(memos.COMPILERS, "k2", memos.printable_line) is None
    assert [str(w.message) for w in said] == [
        f"hatch-precompile: not using the per-user memos: {directory} is owned by uid {OTHER_UID}, not "
        "by this user (uid 0 (root)); the checks they would skip run as usual"]
    assert sorted(p.name for p in directory.iterdir()) == ["k1"]


@needs_root
def test_one_memo_another_account_planted_in_a_dir_of_ours_is_ignored_and_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    memos.put(memos.COMPILERS, "k1", "g++ 12")
    memo = tmp_path / "cache" / "hatch-precompile" / memos.COMPILERS / "k1"
    os.chown(memo, OTHER_UID, OTHER_UID)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert memos.get(memos.COMPILERS, "k1", memos.printable_line) is None
        memos.put(memos.COMPILERS, "k1", "g++ 12")
    assert memo.stat().st_uid == 0 and memos.get(memos.COMPILERS, "k1", memos.printable_line) == "g++ 12"


def test_a_store_dir_is_this_users_or_untrusted(tmp_path):
    directory = tmp_path / "d"
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    with private_dirs.open_private(tmp_path, ("d",)) as opened:
        assert stat.S_IMODE(opened.stat().st_mode) == 0o700
    (tmp_path / "link").symlink_to(directory)
    with pytest.raises(Untrusted, match="link is a symlink or not a directory"):
        private_dirs.open_private(tmp_path, ("link",))
    with pytest.raises(FileNotFoundError):
        private_dirs.open_private(tmp_path, ("missing",))
    with private_dirs.open_private(tmp_path, ("made", "deeper"), create=True):
        pass
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "made", tmp_path / "made" / "deeper")} == {0o700}
    assert files_in(tmp_path / "made") == []


def test_a_key_as_long_as_a_cuda_builds_triton_key_is_remembered(tmp_path, monkeypatch):
    """torch 2.14.1+cu130's Triton key is ~1.9 kB: remembered like any other line."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    key = "3.8.0" + "-".join("ab" * 32 for _ in range(30))
    memos.put(memos.TRITON_KEYS, "fingerprint", key)
    assert memos.get(memos.TRITON_KEYS, "fingerprint", memos.printable_line) == key
