"""Writing a checked artifact set into the Inductor cache dir: all or nothing, never clobbering.

Torch's default cache dir sits in a shared ``/tmp``, and what goes there is native code that
torch will ``dlopen``. So:

- the cache dir must be ours and writable by nobody else (one of ours that the group may write,
  as torch makes it under umask 002, is tightened to 0700 and used); every existing dir on the
  way to it owned by us or root and writable by nobody else unless sticky (like ``/tmp``), and no
  symlink on the way owned by another user; missing dirs are created ``0700`` (private_dirs.py);
- every file is read and hashed before the first one is written;
- below the cache dir, work is relative to directory descriptors opened without following
  symlinks, so no component of a destination path is followed through one (where the OS has no
  directory descriptors, every component is checked instead);
- a file already at a destination counts only if it is a regular file of ours with the size
  the manifest gives (one cut short by a power loss is replaced, by a rename: whole or not at all);
- each file is written under an unpredictable temp name in its destination dir and hard-linked
  into place: an existing entry is never replaced and nobody sees half a file. Where hard links
  are not supported, it is renamed with ``RENAME_NOREPLACE`` (Linux), else renamed after a look;
- if anything fails part-way (a full disk, a symlink met at file 20), what this call linked is
  removed again, and the caller reports the reason.

Needs no torch: the caller passes the kernels' install paths (relocate.py).
"""

from __future__ import annotations

import getpass
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatch_precompile.errors import Skip, Untrusted
from hatch_precompile.protocol import CACHE_DIR_VAR, INDUCTOR_DIR
from hatch_precompile.run.caches import relocate
from hatch_precompile.run.sets import private_dirs
from hatch_precompile.run.sets.artifacts import ArtifactSet
from hatch_precompile.run.sets.private_dirs import Dir, quietly

# Torch names its default dir after the user; from 2.13 a uid with no passwd entry (a container run
# with --user, OpenShift's arbitrary uids) gets "uid_<uid>" instead of an error (pytorch PR 184208).
UID_FALLBACK_SINCE = (2, 13)


def inductor_cache_dir() -> Path:
    """The absolute dir Inductor will use (mirrors torch._inductor.runtime.cache_dir_utils).

    A relative ``TORCHINDUCTOR_CACHE_DIR`` is made absolute in ``os.environ``: torch resolves it
    against the working dir at every compile, and the files must stay where torch looks.
    """
    configured = os.environ.get(CACHE_DIR_VAR)
    if configured:
        if not os.path.isabs(configured):
            os.environ[CACHE_DIR_VAR] = configured = os.path.abspath(configured)
        return Path(configured)
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError) as exc:  # no passwd entry for this uid
        version = _torch_version()
        if version is None or version < UID_FALLBACK_SINCE:
            raise Skip(
                f"torch {'.'.join(map(str, version or ())) or '(unknown version)'} cannot name its default "
                f"cache dir for uid {os.getuid() if hasattr(os, 'getuid') else '?'}, which has no user name "
                f"(getpass.getuser() failed: {exc!r}), and will fail at the first compile: set {CACHE_DIR_VAR}"
            ) from None
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def _torch_version() -> tuple[int, int] | None:
    """(major, minor) of the torch this process uses (imported by now: the environment key)."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            from importlib import metadata

            text = metadata.version("torch")
        except Exception:  # not installed, or its metadata unreadable
            return None
    else:
        text = str(getattr(torch, "__version__", ""))
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else None


def destinations(artifacts: ArtifactSet, torch_dir: str | None, compiler: str = "") -> dict[str, str]:
    """Manifest path -> path inside the cache dir, renaming relocatable kernels for the torch
    installed at ``torch_dir`` and the compiler command ``compiler`` (None: the build's names)."""
    prefix = INDUCTOR_DIR + "/"
    dest = {p: p[len(prefix):] for p in artifacts.manifest.files if p.startswith(prefix)}
    if torch_dir is None:
        return dest
    values = relocate.path_values(torch_dir, compiler)
    for kernel in artifacts.manifest.kernels:
        source = artifacts.read(kernel.source).decode("utf-8")
        new_key = relocate.code_key(source, relocate.render(kernel.command, values))
        if new_key == kernel.key:
            continue
        for path in kernel.files:
            name = path.rsplit("/", 1)[1].replace(kernel.key, new_key, 1)
            dest[path] = relocate.cache_relpath(new_key, name[len(new_key):])
    return dest


def install(artifacts: ArtifactSet, wanted: dict[str, str], cache_dir: Path) -> tuple[int, int]:
    """Write ``wanted`` (manifest path -> cache path) into ``cache_dir``; (installed, present).

    Raises Skip, having written nothing that stays, when any of it cannot be done safely."""
    cache_dir = prepare(cache_dir)
    with _Writer(cache_dir) as writer:
        size = {dest: artifacts.manifest.files[source].size for source, dest in wanted.items()}
        pending = {dest: source for source, dest in wanted.items() if not writer.present(dest, size[dest])}
        present = len(wanted) - len(pending)
        blobs = {dest: artifacts.read(source) for dest, source in pending.items()}  # all verified first
        installed = 0
        for dest, blob in blobs.items():
            if writer.write(dest, blob):
                installed += 1
            else:
                present += 1
    return installed, present


def prepare(cache_dir: Path) -> Path:
    """The cache dir's real path, once it exists and is safe to write code into (else Skip)."""
    for existing in [p for p in (cache_dir, *cache_dir.parents) if os.path.lexists(p)]:
        info = os.lstat(existing)
        if stat.S_ISLNK(info.st_mode) and not private_dirs.trusted_owner(info):
            raise Skip(_refusal(cache_dir, f"{existing} is a symlink owned by {private_dirs.owner(info.st_uid)}"))
    missing = [p for p in (cache_dir, *cache_dir.parents) if not os.path.lexists(p)]
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass  # another process was first: checked below like any dir we did not create
        except OSError as exc:
            raise Skip(f"cannot create the Inductor cache dir {cache_dir}: {exc}") from None
    real = Path(os.path.realpath(cache_dir))
    for ancestor in reversed(real.parents):
        problem = _shared_ancestor(ancestor, os.lstat(ancestor))
        if problem:
            raise Skip(_refusal(cache_dir, problem))
    try:
        with Dir.open(str(real)) as opened:
            private_dirs.make_private(opened, real)  # torch made it 0775 under umask 002: 0700 now
    except Untrusted as exc:
        raise Skip(_refusal(cache_dir, str(exc))) from None
    except OSError as exc:
        raise Skip(f"cannot open the Inductor cache dir {cache_dir}: {exc}") from None
    return real


def _shared_ancestor(path: Path, info: os.stat_result) -> str | None:
    """Why another account could replace what is in the dir ``path`` (a cache dir's ancestor), or None."""
    if not private_dirs.HAS_OWNERS:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    problem = private_dirs.foreign(path, info)
    if problem is None and not info.st_mode & stat.S_ISVTX and private_dirs.writable_by_others(path, info):
        problem = f"{private_dirs.writable_by_others(path, info)} and not sticky, so another account can replace what is in it"
    return problem


def _refusal(cache_dir: Path, problem: str) -> str:
    """The one line for a cache dir another account could write: what, and what torch does there."""
    torch_does = ("torch itself still compiles into it and loads what it finds there" if os.access(cache_dir, os.W_OK)
                  else "torch itself cannot write there, and its compiles fail")
    return f"refusing the Inductor cache dir {cache_dir}: {problem}; {torch_does}: set {CACHE_DIR_VAR} to a dir of your own"


class _Writer:
    """Writes new entries below one cache dir; undoes them all unless the block ends cleanly."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.dirs: dict[tuple[str, ...], Dir] = {}
        self.made: list[tuple[tuple[str, ...], str]] = []  # dirs this call created
        self.linked: list[tuple[tuple[str, ...], str]] = []  # entries this call created or replaced
        self.unfit: set[str] = set()  # entries there, but not a whole file of ours

    def __enter__(self) -> "_Writer":
        self.dirs[()] = Dir.open(str(self.cache_dir))
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        try:
            if kind is not None:
                for parts, name in reversed(self.linked):
                    quietly(self.dirs[parts].unlink, name)
                for parts, name in reversed(self.made):
                    quietly(self.dirs[parts].rmdir, name)  # fails if another process filled it
        finally:
            for directory in self.dirs.values():
                directory.close()

    def present(self, dest: str, size: int) -> bool:
        """Whether ``dest`` is a regular file of ours of ``size`` bytes. One that is not (a file cut
        short by a power loss, another account's) is replaced by ``write``."""
        *parts, name = dest.split("/")
        directory = self._open(tuple(parts), create=False)
        try:
            info = directory.lstat(name) if directory is not None else None
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise Skip(f"cannot look at {dest} in the Inductor cache dir {self.cache_dir}: {exc}") from None
        if info is None:
            return False
        if stat.S_ISREG(info.st_mode) and info.st_size == size and private_dirs.trusted_owner(info):
            return True
        self.unfit.add(dest)
        return False

    def write(self, dest: str, blob: bytes) -> bool:
        """Put ``blob`` at ``dest`` unless an entry is there; False if one was (someone was first).
        An entry ``present`` found unfit is replaced, by a rename."""
        *parts, name = dest.split("/")
        directory = self._dir(tuple(parts))
        mode = 0o755 if name.endswith(".so") else 0o644
        tmp = None
        try:
            if dest in self.unfit:
                directory.replace(name, blob, mode)
                linked = True
            else:
                tmp = directory.write_temp(blob, mode)
                linked = directory.link_new(tmp, name)
        except OSError as exc:
            raise Skip(f"cannot write {dest} into the Inductor cache dir {self.cache_dir}: {exc}") from None
        finally:
            if tmp is not None:
                quietly(directory.unlink, tmp)
        if linked:
            self.linked.append((tuple(parts), name))
        return linked

    def _dir(self, parts: tuple[str, ...]) -> Dir:
        """The dir ``parts`` below the cache dir, never a symlink, made (0700) where missing."""
        directory = self._open(parts, create=True)
        if directory is None:  # only an existing dir's lookup finds none
            raise Skip(f"cannot make {'/'.join(parts)} in the Inductor cache dir {self.cache_dir}")
        return directory

    def _open(self, parts: tuple[str, ...], create: bool) -> Dir | None:
        """The dir ``parts`` below the cache dir, never a symlink; made (0700) where missing, or
        None there unless ``create``."""
        if parts not in self.dirs:
            parent = self._open(parts[:-1], create)
            if parent is None:
                return None
            try:
                if create:
                    parent.mkdir(parts[-1])
                    self.made.append((parts[:-1], parts[-1]))
                else:
                    parent.lstat(parts[-1])
            except FileExistsError:
                pass
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise Skip(f"cannot write to the Inductor cache dir {self.cache_dir}: {exc}") from None
            try:
                self.dirs[parts] = parent.sub(parts[-1])
            except OSError:
                raise Skip(
                    f"{self.cache_dir / '/'.join(parts)} in the Inductor cache dir is a symlink or not a directory"
                ) from None
        return self.dirs[parts]
