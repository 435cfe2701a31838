"""Writing a checked artifact set into the Inductor cache dir: verified first, no-clobber, atomic.

Every file is read and hashed before the first one is written, so a bad file leaves the cache dir
untouched. Each file is written to a temp name in its destination dir and hard-linked into place,
so concurrent loaders and Inductor itself never see a partial entry, and an entry already present
is never replaced. Needs no torch: the caller passes the kernels' install paths (relocate.py).
"""

from __future__ import annotations

import getpass
import os
import re
import stat
import tempfile
import threading
from pathlib import Path

from hatch_precompile.protocol import CACHE_DIR_VAR, INDUCTOR_DIR
from hatch_precompile.run import relocate
from hatch_precompile.run.artifacts import ArtifactSet, Skip


def inductor_cache_dir() -> Path:
    """The dir Inductor will use (mirrors torch._inductor.runtime.cache_dir_utils)."""
    configured = os.environ.get(CACHE_DIR_VAR)
    if configured:
        return Path(os.path.abspath(configured))
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def destinations(artifacts: ArtifactSet, torch_dir: str | None) -> dict[str, str]:
    """Manifest path -> path inside the cache dir, renaming relocatable kernels for the torch
    installed at ``torch_dir`` (None: keep the build's names)."""
    prefix = INDUCTOR_DIR + "/"
    dest = {p: p[len(prefix):] for p in artifacts.manifest.files if p.startswith(prefix)}
    if torch_dir is None:
        return dest
    values = relocate.path_values(torch_dir)
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
    """Write ``wanted`` (manifest path -> cache path) into ``cache_dir``; (installed, present)."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Skip(f"cannot create the Inductor cache dir {cache_dir}: {exc}") from None
    if cache_dir.is_symlink() and cache_dir.lstat().st_uid != os.getuid():
        raise Skip(f"the Inductor cache dir {cache_dir} is a symlink owned by another user")
    pending = {
        cache_dir / relpath: source
        for source, relpath in wanted.items()
        if not os.path.lexists(cache_dir / relpath)
    }
    present = len(wanted) - len(pending)
    blobs = {target: artifacts.read(source) for target, source in pending.items()}
    installed = 0
    for target, blob in blobs.items():
        _make_dirs(cache_dir, target.parent)
        if _write_new(target, blob):
            installed += 1
        else:
            present += 1
    return installed, present


def _make_dirs(cache_dir: Path, directory: Path) -> None:
    """mkdir -p below the cache dir, refusing to walk through a symlink planted there."""
    current = cache_dir
    for part in directory.relative_to(cache_dir).parts:
        current = current / part
        try:
            os.mkdir(current, 0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            raise Skip(f"cannot write to the Inductor cache dir {cache_dir}: {exc}") from None
        mode = os.lstat(current).st_mode
        if not stat.S_ISDIR(mode):
            raise Skip(f"{current} in the Inductor cache dir is a symlink or not a directory")


def _write_new(target: Path, blob: bytes) -> bool:
    """Write ``target`` atomically unless it exists; False if someone else was first."""
    tmp = target.parent / f".hatch-precompile-{os.getpid()}-{threading.get_ident()}.tmp"
    mode = 0o755 if target.suffix == ".so" else 0o644
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
        try:
            os.link(tmp, target)  # fails if target exists: never clobbers
        except FileExistsError:
            return False
        except OSError:  # filesystems without hard links
            if os.path.lexists(target):
                return False
            os.rename(tmp, target)
            return True
        return True
    except OSError as exc:
        raise Skip(f"cannot write to the Inductor cache dir: {exc}") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
