"""Dirs only this user can write: checked for owner and mode, walked without following symlinks,
written through unpredictable temp names.

What hatch-precompile writes and later reads back (kernels torch will ``dlopen``, the per-user
store of ``warm``, the memos that let a process skip a check) must be what this user wrote. So:

- a dir is this user's when this user owns it (or root does) and no other account can write it;
  one of ours with group or other write bits (made under umask 002) is tightened to 0700 and used,
  since nobody else can have put anything the per-entry owner checks would not catch;
- a file is read only if this user (or root) owns it and nobody else may write it;
- below a dir that was checked, each dir is opened relative to its parent's descriptor with
  ``O_NOFOLLOW`` (where the OS has no directory descriptors, each component is checked instead),
  so that no symlink is followed and a path swapped after the check is not the one used;
- new files are created with ``O_EXCL`` under an unpredictable name in their final dir, then
  renamed or linked into place: nobody sees half a file under its final name.

Standard library only: ``load()`` works through these.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
import sys
from pathlib import Path
from typing import Any

from hatch_precompile.errors import Untrusted

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
HAS_DIR_FDS = all(f in os.supports_dir_fd for f in (os.open, os.mkdir, os.link, os.unlink, os.rmdir, os.rename))
HAS_OWNERS = hasattr(os, "geteuid")  # POSIX; on Windows the OS's ACLs are the user's business
# What link() says on filesystems that have no hard links (vfat, some network and FUSE mounts).
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV, errno.ENOSYS, errno.EACCES}
LOOSE = stat.S_IWGRP | stat.S_IWOTH


def owner(uid: int) -> str:
    """``uid 4343 (bob)``, or ``uid 4242`` where the uid has no passwd entry."""
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def me() -> str:
    return owner(os.geteuid()) if HAS_OWNERS else "this user"


def trusted_owner(info: os.stat_result) -> bool:
    """Owned by this user, or by root (who can write anything of ours anyway)."""
    return not HAS_OWNERS or info.st_uid in (os.geteuid(), 0)


def foreign(path: Path | str, info: os.stat_result) -> str | None:
    """``<path> is owned by uid 4343 (bob), not by this user (uid 1000 (alice))``, or None."""
    if trusted_owner(info):
        return None
    return f"{path} is owned by {owner(info.st_uid)}, not by this user ({me()})"


def writable_by_others(path: Path | str, info: os.stat_result) -> str | None:
    """``<path> is writable by its group (mode 0775)``, or None."""
    if not HAS_OWNERS or not info.st_mode & LOOSE:
        return None
    who = "all users" if info.st_mode & stat.S_IWOTH else "its group"
    return f"{path} is writable by {who} (mode {stat.S_IMODE(info.st_mode):04o})"


def make_private(directory: "Dir", shown: Path | str) -> None:
    """Raise Untrusted unless ``directory`` (opened without following a symlink) is this user's
    and writable by nobody else; one of ours with loose bits is tightened to 0700 first."""
    info = directory.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise Untrusted(f"{shown} is not a directory")
    problem = foreign(shown, info)
    if problem:
        raise Untrusted(problem)
    if HAS_OWNERS and info.st_mode & LOOSE:
        if info.st_uid != os.geteuid():  # root's, with loose bits: not ours to change
            raise Untrusted(str(writable_by_others(shown, info)))
        import logging

        logging.getLogger("hatch_precompile").debug(
            "tightened %s from mode %04o to 0700 (made under a umask that lets the group write)",
            shown, stat.S_IMODE(info.st_mode))
        directory.chmod(0o700)


def open_private(anchor: Path, parts: tuple[str, ...], create: bool = False) -> "Dir":
    """The dir ``anchor/parts...``, each of ``parts`` checked by make_private (raises Untrusted)
    and made 0700 where missing when ``create`` (else FileNotFoundError). ``anchor`` is opened as
    the user set it (a ``~/.cache`` that is a symlink stays one); nothing below it is followed."""
    if create:
        os.makedirs(anchor, 0o700, exist_ok=True)
    directory = Dir.open(str(anchor), follow=True)
    shown = anchor
    try:
        for name in parts:
            shown = shown / name
            if create:
                try:
                    directory.mkdir(name)
                except FileExistsError:
                    pass
            child = directory.private_sub(name, shown)
            directory.close()
            directory = child
        return directory
    except BaseException:
        directory.close()
        raise


class Dir:
    """A directory: an fd opened without following symlinks, or (no dir fds) a checked path."""

    def __init__(self, fd: int | None, path: str) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def open(cls, path: str, follow: bool = False) -> "Dir":
        """``path`` itself not followed if it is a symlink, unless ``follow``."""
        flags = _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0) if follow else _DIR_FLAGS
        return cls(os.open(path, flags) if HAS_DIR_FDS else None, path)

    def __enter__(self) -> "Dir":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def sub(self, name: str) -> "Dir":
        path = os.path.join(self.path, name)
        if self.fd is not None:
            return Dir(os.open(name, _DIR_FLAGS, dir_fd=self.fd), path)
        if not stat.S_ISDIR(os.lstat(path).st_mode):  # lstat: a symlink is not a dir
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        return Dir(None, path)

    def private_sub(self, name: str, shown: Path | str) -> "Dir":
        """``sub``, checked by make_private (raises Untrusted, or FileNotFoundError)."""
        problem = foreign(shown, self.lstat(name))  # first: another's 0700 dir cannot even be opened
        if problem:
            raise Untrusted(problem)
        try:
            child = self.sub(name)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise Untrusted(f"{shown} is a symlink or not a directory") from None
            raise
        try:
            make_private(child, shown)
        except BaseException:
            child.close()
            raise
        return child

    def _name(self, name: str) -> str:
        return name if self.fd is not None else os.path.join(self.path, name)

    def stat(self) -> os.stat_result:
        return os.fstat(self.fd) if self.fd is not None else os.lstat(self.path)

    def lstat(self, name: str) -> os.stat_result:
        return os.stat(self._name(name), dir_fd=self.fd, follow_symlinks=False)

    def chmod(self, mode: int) -> None:
        if self.fd is not None:
            os.fchmod(self.fd, mode)
        else:
            os.chmod(self.path, mode)

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd if self.fd is not None else self.path))

    def mkdir(self, name: str) -> None:
        os.mkdir(self._name(name), 0o700, dir_fd=self.fd)

    def rmdir(self, name: str) -> None:
        os.rmdir(self._name(name), dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        os.unlink(self._name(name), dir_fd=self.fd)

    def rename(self, name: str, target: "Dir", new_name: str) -> None:
        os.rename(self._name(name), target._name(new_name), src_dir_fd=self.fd, dst_dir_fd=target.fd)

    def open_file(self, name: str, flags: int, mode: int = 0o600) -> int:
        """``os.open`` of ``name`` in this dir, never through a symlink."""
        return os.open(self._name(name), flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), mode,
                       dir_fd=self.fd)

    def read(self, name: str, limit: int | None = None) -> bytes:
        """The bytes of the regular file ``name``, never through a symlink, only if this user (or
        root) owns it and nobody else may write it (raises Untrusted); OSError when it cannot be
        read, or is over ``limit``."""
        fd = os.open(self._name(name), _READ_FLAGS, dir_fd=self.fd)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", os.path.join(self.path, name))
            shown = os.path.join(self.path, name)
            problem = foreign(shown, info) or writable_by_others(shown, info)  # changed by others since?
            if problem:
                raise Untrusted(problem)
            if limit is not None and info.st_size > limit:
                raise OSError(errno.EFBIG, f"over {limit} bytes", os.path.join(self.path, name))
            return handle.read()

    def create(self, name: str, blob: bytes, mode: int) -> None:
        """Create ``name`` exclusively (never through a symlink) holding ``blob``."""
        with os.fdopen(os.open(self._name(name), _NEW_FILE, mode, dir_fd=self.fd), "wb") as handle:
            handle.write(blob)

    def write_temp(self, blob: bytes, mode: int) -> str:
        """A new file holding ``blob`` under an unpredictable name in this dir (O_EXCL); its name."""
        temp = f".hatch-precompile-{secrets.token_hex(8)}.tmp"
        try:
            self.create(temp, blob, mode)
        except BaseException:
            quietly(self.unlink, temp)
            raise
        return temp

    def replace(self, name: str, blob: bytes, mode: int = 0o600) -> None:
        """Put ``blob`` at ``name``, whole, replacing whatever entry is there (a rename)."""
        temp = self.write_temp(blob, mode)
        try:
            os.replace(self._name(temp), self._name(name), src_dir_fd=self.fd, dst_dir_fd=self.fd)
        finally:
            quietly(self.unlink, temp)

    def link_new(self, tmp: str, name: str) -> bool:
        """Give the file ``tmp`` the name ``name`` unless that exists (False); never replaces an
        entry, never shows half a file under ``name``."""
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
        # Last resort (no hard links, no renameat2: FAT, exFAT): a whole file renamed into place.
        # Another process may put the same name there between the look and the rename; the names
        # are content keys, so what it replaces is the same bytes, whole either way.
        try:
            self.lstat(name)
            return False
        except FileNotFoundError:
            pass
        os.replace(self._name(tmp), self._name(name), src_dir_fd=self.fd, dst_dir_fd=self.fd)
        return True

    def _rename_noreplace(self, tmp: str, name: str) -> bool | None:
        """renameat2(RENAME_NOREPLACE): True; False if ``name`` exists; None where unsupported."""
        renameat2 = renameat2_function()
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
            self.fd = None


def renameat2_function() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None


def quietly(call: Any, name: str) -> None:
    try:
        call(name)
    except OSError:
        pass
