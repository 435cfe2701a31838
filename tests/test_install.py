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

from hatch_precompile.protocol import FileEntry, Manifest, sha256
from hatch_precompile.run import artifacts, install, loader

FILES = {
    "inductor/aotautograd/akey/entry": b"aot entry",
    "inductor/fxgraph/fx/fkey/entry": b"fx entry",
    "inductor/ab/cabkernel.main.so": b"\x7fELF kernel",
    "inductor/ab/cabkernel.main.cpp": b"int main() {}",
}
_names = itertools.count()


@pytest.fixture(scope="module")
def env_here() -> dict:
    return artifacts.environment_key()  # imports torch once: the key is compared field by field


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(directory))
    for name in list(os.environ):
        if name.startswith("PRECOMPILE") or name == "HATCH_PRECOMPILE_BUILDING":
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    return directory


def ship(tmp_path, monkeypatch, env, files=FILES, manifest: dict | None = None) -> tuple[str, Path]:
    """A package ``fakepkgN`` on sys.path with ``files`` and their manifest in ``_precompiled/``."""
    package = f"fakepkg{next(_names)}"
    root = tmp_path / "site" / package
    shipped = root / "_precompiled"
    for path, blob in files.items():
        (shipped / path).parent.mkdir(parents=True, exist_ok=True)
        (shipped / path).write_bytes(blob)
    (root / "__init__.py").write_text("")
    data = Manifest(package, env, {p: FileEntry(len(b), sha256(b)) for p, b in files.items()}).to_dict()
    data.update(manifest or {})
    (shipped / "manifest.json").write_text(json.dumps(data))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return package, shipped


def files_in(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def assert_skipped(package: str, cache: Path, reason: str) -> str:
    with pytest.warns(loader.PrecompileWarning, match=f"not using {package}'s precompiled caches"):
        result = loader.load(package)
    assert not result.loaded and result.installed == 0
    assert reason in result.reason, result.reason
    assert files_in(cache) == [], "a skipped load must leave the cache dir untouched"
    return result.reason


def test_installs_every_listed_file_atomically_and_never_twice(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    result = loader.load(package)
    assert result.loaded and (result.installed, result.present) == (len(FILES), 0)
    for path, blob in FILES.items():
        assert (cache / path.removeprefix("inductor/")).read_bytes() == blob
    kernel = cache / "ab" / "cabkernel.main.so"
    assert stat.S_IMODE(kernel.stat().st_mode) == 0o755
    assert not [p for p in files_in(cache) if p.name.endswith(".tmp")]
    found = artifacts.find(package)
    assert install.install(found, install.destinations(found, None), cache) == (0, len(FILES))


def test_missing_file(tmp_path, monkeypatch, env_here, cache):
    package, shipped = ship(tmp_path, monkeypatch, env_here)
    (shipped / "inductor/ab/cabkernel.main.so").unlink()
    assert_skipped(package, cache, "inductor/ab/cabkernel.main.so cannot be read")


def test_truncated_file(tmp_path, monkeypatch, env_here, cache):
    package, shipped = ship(tmp_path, monkeypatch, env_here)
    (shipped / "inductor/ab/cabkernel.main.so").write_bytes(b"\x7fELF")
    assert_skipped(package, cache, "inductor/ab/cabkernel.main.so does not match its sha256")


def test_altered_file_of_the_same_size_is_refused_before_anything_is_written(tmp_path, monkeypatch, env_here, cache):
    package, shipped = ship(tmp_path, monkeypatch, env_here)
    (shipped / "inductor/fxgraph/fx/fkey/entry").write_bytes(b"fx entrY")
    assert_skipped(package, cache, "inductor/fxgraph/fx/fkey/entry does not match its sha256")


def test_unlisted_file_is_never_installed(tmp_path, monkeypatch, env_here, cache):
    package, shipped = ship(tmp_path, monkeypatch, env_here)
    (shipped / "inductor/zz").mkdir()
    (shipped / "inductor/zz/czzplanted.main.so").write_bytes(b"\x7fELF not ours")
    assert loader.load(package).loaded
    assert not (cache / "zz").exists()


@pytest.mark.parametrize(
    ("manifest", "reason"),
    [
        ({"format": 99}, "manifest format 99 is not the supported format 1"),
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
    (shipped / "manifest.json").write_text("{not json")
    assert_skipped(package, cache, "manifest.json does not parse")


def test_environment_mismatch_names_the_first_differing_field(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, dict(env_here, torch="2.7.0+cpu", cxx="other"))
    reason = assert_skipped(package, cache, "built for torch='2.7.0+cpu', this environment has torch=")
    assert reason.endswith(f"or run `hatch-precompile warm {package}`")


def test_symlink_out_of_the_artifact_dir(tmp_path, monkeypatch, env_here, cache):
    package, shipped = ship(tmp_path, monkeypatch, env_here)
    victim = shipped / "inductor/ab/cabkernel.main.so"
    outside = tmp_path / "outside.so"
    outside.write_bytes(victim.read_bytes())  # same bytes: only the symlink itself can be refused
    victim.unlink()
    victim.symlink_to(outside)
    assert_skipped(package, cache, "inductor/ab/cabkernel.main.so is a symlink")


def test_existing_entries_are_never_overwritten(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    (cache / "ab").mkdir(parents=True)
    (cache / "ab" / "cabkernel.main.so").write_bytes(b"somebody else's entry")
    result = loader.load(package)
    assert result.loaded and (result.installed, result.present) == (len(FILES) - 1, 1)
    assert (cache / "ab" / "cabkernel.main.so").read_bytes() == b"somebody else's entry"


def test_planted_symlink_in_the_cache_dir_is_not_followed(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache.mkdir()
    (cache / "aotautograd").symlink_to(elsewhere)
    with pytest.warns(loader.PrecompileWarning):
        result = loader.load(package)
    assert not result.loaded and "aotautograd in the Inductor cache dir is a symlink" in result.reason
    assert files_in(elsewhere) == []


def test_uncreatable_cache_dir(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(loader.PrecompileWarning):
        result = loader.load(package)
    assert not result.loaded and result.reason.startswith("cannot create the Inductor cache dir")


def test_switched_off_loads_nothing_and_says_why(tmp_path, monkeypatch, env_here, cache):
    package, _ = ship(tmp_path, monkeypatch, env_here)
    monkeypatch.setenv("PRECOMPILE", "0")
    result = loader.load(package)
    assert not result.loaded and result.reason == "disabled by PRECOMPILE=0"
    assert files_in(cache) == []
