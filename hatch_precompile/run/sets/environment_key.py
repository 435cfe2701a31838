"""This process's environment key: what must match for compiled artifacts to be reused safely.

The fields and their comparison are protocol.py's; every field is compared exactly. The FX graph
key inside torch already covers torch's own source and the inputs; these fields cover what it does
not: the CPU vector capability (a mismatch makes torch's own recipe crash: it hits the FX entry,
then fails to build its kernel source without the ISA's defines), the CPython minor version and
ABI (the pybinding kernels are built against its C-API), and the GPU stack when there is one: the
model and compute capability of the GPU torch will call ``cuda:0``, the CUDA version torch was
built with, and Triton's version.

The C++ compiler is not a key field: the shipped kernels are binaries, and any compiler of the
same family stands in for the build's (``compiler()``; see run/caches/cache_keys_as_built.py).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from typing import Any

from hatch_precompile.errors import Unidentified
from hatch_precompile.run.sets import gpu, memos


def cxx_command() -> str:
    """The compiler Inductor will call (mirrors ``torch._inductor.config.cpp.cxx``)."""
    return os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")


@functools.lru_cache(maxsize=None)
def compiler_version(command: str) -> str:
    try:
        proc = subprocess.run(
            [command, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable ({exc.__class__.__name__})"
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0].strip() if proc.returncode == 0 and lines else f"unavailable (exit {proc.returncode})"


# A compiler binary's own name: a wrapper (ccache, distcc) may change compilers behind one file.
_COMPILER_NAME = re.compile(r"(^|[-_/])(g\+\+|gcc|c\+\+|cc|clang\+\+|clang)(-[\d.]+)?$")
# The first bytes of an executable object file: ELF, Mach-O (32/64 bits, either byte order, fat), PE.
_OBJECT_MAGIC = (b"\x7fELF", b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
                 b"\xca\xfe\xba\xbe", b"MZ")


def is_compiler_binary(real: str) -> bool:
    """Whether the file ``real`` (a resolved path) is a compiler's own binary, whose ``--version``
    holds for as long as the file is unchanged: named as a compiler, and an executable object file.
    Not a script, whatever its name (Spack's ``cc``, Nix's ``g++``: they run whichever compiler
    they were set up with), nor a link to ccache, sccache or distcc (it resolves to their name)."""
    if not _COMPILER_NAME.search(os.path.basename(real)):
        return False
    try:
        with open(real, "rb") as handle:
            head = handle.read(4)
    except OSError:
        return False
    return head.startswith(_OBJECT_MAGIC)


def _valid_version(line: str) -> bool:
    return memos.printable_line(line) and not line.startswith("unavailable")


@functools.lru_cache(maxsize=None)
def remembered_compiler_version(command: str) -> str:
    """``compiler_version``, remembered per user by the compiler file's identity (path, inode,
    size, times), so that a warm process starts no compiler just to name it: a compiler replaced
    or upgraded is another file, and asked again. A wrapper or a script is always asked."""
    found = shutil.which(command)
    if found is None:
        return "unavailable (not found)"
    real = os.path.realpath(found)
    if not is_compiler_binary(real):
        return compiler_version(command)
    try:
        st = os.stat(real)
    except OSError:
        return compiler_version(command)
    identity = f"{real}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
    key = hashlib.sha256(identity.encode()).hexdigest()
    remembered = memos.get(memos.COMPILERS, key, _valid_version)
    if remembered is not None:
        return remembered
    version = compiler_version(command)
    if _valid_version(version):
        memos.put(memos.COMPILERS, key, version)
    return version


def compiler_family(command: str, version_line: str = "") -> str:
    """"gcc", "clang" or "other", as Inductor tells them apart (``cpp_builder._is_gcc`` and
    ``_is_clang`` look at the command's name; Apple's clang answers to ``g++`` too)."""
    if sys.platform == "darwin":
        return "clang" if "Apple" in version_line or "clang" in command else "other"
    if re.search(r"(clang|clang\+\+)", command):
        return "clang"
    if re.search(r"(gcc|g\+\+|gnu-c\+\+)", command):
        return "gcc"
    return "other"


def compiler() -> dict[str, str]:
    """The compiler Inductor will call here: its command, --version line (remembered) and family."""
    command = cxx_command()
    version = remembered_compiler_version(command)
    return {"command": command, "version": version, "family": compiler_family(command, version)}


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def current(torch: Any) -> dict[str, str | None]:
    """The key of this process. ``torch`` is the imported module (callers import it lazily).

    Never initialises CUDA (see gpu.py): a GPU that cannot be named without it gets a value
    that matches no build, with the reason, so the artifacts are skipped, not misused.
    """
    cuda = getattr(torch.version, "cuda", None)
    device = None
    if cuda:
        try:
            device = gpu.identify()
        except Unidentified as exc:
            device = gpu.Device(f"unidentified: {exc}", "unidentified", "")
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "python_abi": sysconfig.get_config_var("SOABI") or sys.implementation.cache_tag + getattr(sys, "abiflags", ""),
        "torch": torch.__version__,
        "system": platform.system(),
        "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cuda": cuda or getattr(torch.version, "hip", None),
        "triton": (_dist_version("triton") or _dist_version("pytorch-triton")) if device else None,
        "gpu": device.name if device else None,
        "gpu_capability": device.capability if device else None,
    }
