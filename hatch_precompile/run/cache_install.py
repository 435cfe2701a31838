"""Writing a checked artifact set into the Inductor cache dir: all or nothing, never clobbering.

Torch's default cache dir sits in a shared ``/tmp``, and what goes there is native code that
torch will ``dlopen``. So:

- the cache dir must be ours and writable by nobody else, every existing dir on the way to it
  owned by us or root and writable by nobody else unless sticky (like ``/tmp``), and no symlink on
  the way owned by another user; missing dirs are created ``0700``;
- every file is read and hashed before the first one is written;
- below the cache dir, work is relative to directory descriptors opened without following
  symlinks, so no component of a destination path is followed through one (where the OS has no
  directory descriptors, every component is checked instead);
- each file is written under an unpredictable temp name in its destination dir and hard-linked
  into place: an existing entry is never replaced and nobody sees half a file. Where hard links
  are not supported, it is renamed with ``RENAME_NOREPLACE`` (Linux), else created exclusively;
- if anything fails part-way (a full disk, a symlink met at file 20), what this call linked is
  removed again, and the caller reports the reason.

Needs no torch: the caller passes the kernels' install paths (relocate.py).
"""

from __future__ import annotations

import ctypes
import errno
import getpass
import os
import re
import secrets
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatch_precompile.protocol import CACHE_DIR_VAR, INDUCTOR_DIR
from hatch_precompile.run import relocate
from hatch_precompile.run.artifacts import ArtifactSet, Skip

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_HAS_DIR_FDS = all(f in os.supports_dir_fd for f in (os.open, os.mkdir, os.link, os.unlink, os.rmdir))
# What link() says on filesystems that have no hard links (vfat, some network and FUSE mounts).
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV, errno.ENOSYS, errno.EACCES}


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
    except Exception as exc:  # no passwd entry for this uid: torch itself cannot name the dir
        raise Skip(
            f"cannot tell which cache dir torch will use: getpass.getuser() failed ({exc!r}); "
            f"set {CACHE_DIR_VAR}"
        ) from None
    return Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


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
    pending = {dest: source for source, dest in wanted.items() if not os.path.lexists(cache_dir / dest)}
    present = len(wanted) - len(pending)
    blobs = {dest: artifacts.read(source) for dest, source in pending.items()}  # all verified first
    installed = 0
    with _Writer(cache_dir) as writer:
        for dest, blob in blobs.items():
            if writer.write_new(dest, blob):
                installed += 1
            else:
                present += 1
    return installed, present


def prepare(cache_dir: Path) -> Path:
    """The cache dir's real path, once it exists and is safe to write code into (else Skip)."""
    refuse = f"refusing the Inductor cache dir {cache_dir}:"
    for existing in [p for p in (cache_dir, *cache_dir.parents) if os.path.lexists(p)]:
        info = os.lstat(existing)
        if stat.S_ISLNK(info.st_mode) and _foreign(info):
            raise Skip(f"{refuse} {existing} is a symlink owned by another user (uid {info.st_uid})")
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
        problem = _unsafe(ancestor, os.lstat(ancestor), mine=False)
        if problem:
            raise Skip(f"{refuse} {problem}")
    problem = _unsafe(real, os.lstat(real), mine=True)
    if problem:
        raise Skip(f"{refuse} {problem}")
    return real


def _foreign(info: os.stat_result) -> bool:
    return hasattr(os, "geteuid") and info.st_uid not in (os.geteuid(), 0)


def _unsafe(path: Path, info: os.stat_result, mine: bool) -> str | None:
    """Why another user could change what is at or under ``path``, or None."""
    if not hasattr(os, "geteuid"):
        return None  # no POSIX owners (Windows): the OS's ACLs are the user's business
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    if (mine and info.st_uid != os.geteuid()) or _foreign(info):
        return f"{path} is owned by another user (uid {info.st_uid})"
    writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and (mine or not info.st_mode & stat.S_ISVTX):
        who = "all users" if info.st_mode & stat.S_IWOTH else "its group"
        return f"{path} is writable by {who} (mode {stat.S_IMODE(info.st_mode):04o}; chmod go-w it)"
    return None


class _Writer:
    """Writes new entries below one cache dir; undoes them all unless the block ends cleanly."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.dirs: dict[tuple[str, ...], _Dir] = {}
        self.made: list[tuple[tuple[str, ...], str]] = []  # dirs this call created
        self.linked: list[tuple[tuple[str, ...], str]] = []  # entries this call created

    def __enter__(self) -> "_Writer":
        self.dirs[()] = _Dir.open(str(self.cache_dir))
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        try:
            if kind is not None:
                for parts, name in reversed(self.linked):
                    _quietly(self.dirs[parts].unlink, name)
                for parts, name in reversed(self.made):
                    _quietly(self.dirs[parts].rmdir, name)  # fails if another process filled it
        finally:
            for directory in self.dirs.values():
                directory.close()

    def write_new(self, dest: str, blob: bytes) -> bool:
        """Put ``blob`` at ``dest`` unless an entry is there; False if one was (someone was first)."""
        *parts, name = dest.split("/")
        directory = self._dir(tuple(parts))
        tmp = f".hatch-precompile-{secrets.token_hex(8)}.tmp"
        mode = 0o755 if name.endswith(".so") else 0o644
        try:
            directory.create(tmp, blob, mode)
            linked = directory.link_new(tmp, name, blob, mode)
        except OSError as exc:
            raise Skip(f"cannot write {dest} into the Inductor cache dir {self.cache_dir}: {exc}") from None
        finally:
            _quietly(directory.unlink, tmp)
        if linked:
            self.linked.append((tuple(parts), name))
        return linked

    def _dir(self, parts: tuple[str, ...]) -> "_Dir":
        """The dir ``parts`` below the cache dir, made (0700) where missing, never a symlink."""
        if parts not in self.dirs:
            parent = self._dir(parts[:-1])
            try:
                parent.mkdir(parts[-1])
                self.made.append((parts[:-1], parts[-1]))
            except FileExistsError:
                pass
            except OSError as exc:
                raise Skip(f"cannot write to the Inductor cache dir {self.cache_dir}: {exc}") from None
            try:
                self.dirs[parts] = parent.sub(parts[-1])
            except OSError:
                raise Skip(
                    f"{self.cache_dir / '/'.join(parts)} in the Inductor cache dir is a symlink or not a directory"
                ) from None
        return self.dirs[parts]


class _Dir:
    """A directory: an fd opened without following symlinks, or (no dir fds) a checked path."""

    def __init__(self, fd: int | None, path: str) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def open(cls, path: str) -> "_Dir":
        return cls(os.open(path, _DIR_FLAGS) if _HAS_DIR_FDS else None, path)

    def sub(self, name: str) -> "_Dir":
        path = os.path.join(self.path, name)
        if self.fd is not None:
            return _Dir(os.open(name, _DIR_FLAGS, dir_fd=self.fd), path)
        if not stat.S_ISDIR(os.lstat(path).st_mode):  # lstat: a symlink is not a dir
            raise NotADirectoryError(path)
        return _Dir(None, path)

    def _name(self, name: str) -> str:
        return name if self.fd is not None else os.path.join(self.path, name)

    def mkdir(self, name: str) -> None:
        os.mkdir(self._name(name), 0o700, dir_fd=self.fd)

    def rmdir(self, name: str) -> None:
        os.rmdir(self._name(name), dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        os.unlink(self._name(name), dir_fd=self.fd)

    def create(self, name: str, blob: bytes, mode: int) -> None:
        """Create ``name`` exclusively (never through a symlink) holding ``blob``."""
        with os.fdopen(os.open(self._name(name), _NEW_FILE, mode, dir_fd=self.fd), "wb") as handle:
            handle.write(blob)

    def link_new(self, tmp: str, name: str, blob: bytes, mode: int) -> bool:
        """Give the file ``tmp`` the name ``name`` unless that exists (False); never replaces."""
        try:
            os.link(self._name(tmp), self._name(name), src_dir_fd=self.fd, dst_dir_fd=self.fd)
            return True
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
        renamed = self._rename_noreplace(tmp, name)
        if renamed is not None:
            return renamed
        try:  # last resort: nothing is replaced, but a reader may see the file while it is written
            self.create(name, blob, mode)
            return True
        except FileExistsError:
            return False

    def _rename_noreplace(self, tmp: str, name: str) -> bool | None:
        """renameat2(RENAME_NOREPLACE): True; False if ``name`` exists; None where unsupported."""
        renameat2 = _renameat2()
        if renameat2 is None:
            return None
        at = self.fd if self.fd is not None else -100  # AT_FDCWD
        if renameat2(at, os.fsencode(self._name(tmp)), at, os.fsencode(self._name(name)), 1) == 0:
            return True
        code = ctypes.get_errno()
        if code == errno.EEXIST:
            return False
        if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            return None
        raise OSError(code, os.strerror(code), name)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None


def _quietly(call: Any, name: str) -> None:
    try:
        call(name)
    except OSError:
        pass
