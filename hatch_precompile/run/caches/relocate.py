"""Moving built CPU kernels between torch installs and compilers.

Inductor names a CPU pybinding kernel (``<key>.main.cpp`` / ``<key>.main.so``) after a hash of
its source *and* its compiler command line, and that command line holds absolute paths
(``-I<site-packages>/torch/include``, ``-L<site-packages>/torch/lib``, and CPython's include and
library dirs) and starts with the compiler's command (``g++``, ``g++-12``, ``/usr/bin/g++``). A
wheel built in pip's isolated build env (``/tmp/pip-build-env-*/...``) and installed anywhere
else, or run where ``CXX`` names another compiler, would therefore miss every such kernel and
recompile it. At build time we record each kernel's hashed command line with those paths and the
compiler replaced by placeholders; at load time we render it with this process's values and
install the kernel under the name this process will look up. (The rest of the command line
depends on the compiler's family only, so a stand-in of the same family renders the same line.) The hash below mirrors
``torch._inductor.cache_key.CODE_CACHE_KEY_STRATEGY``; the build checks that it reproduces every
recorded key, so a torch that hashes differently only loses the relocation, never correctness:
a wrong name is simply never looked up.
"""

from __future__ import annotations

import base64
import hashlib
import os
import sysconfig

TORCH_DIR = "@TORCH_DIR@"
PY_INCLUDE = "@PY_INCLUDE@"
PY_INCLUDE_POSIX = "@PY_INCLUDE_POSIX@"
PY_LIBDIR = "@PY_LIBDIR@"
CXX = "@CXX@"
# The hashed command line names its source file "i": the compiler is the word before it.
_SOURCE = " i "


def path_values(torch_dir: str, compiler: str = "") -> dict[str, str]:
    """This process's values for each placeholder (what Inductor's cpp_builder puts in -I, and
    the compiler command it starts the line with)."""
    return {
        TORCH_DIR: torch_dir,
        PY_INCLUDE: sysconfig.get_path("include"),
        PY_INCLUDE_POSIX: sysconfig.get_path("include", scheme="posix_prefix"),
        PY_LIBDIR: sysconfig.get_config_var("LIBDIR") or "",
        CXX: compiler,
    }


def to_template(command: str, values: dict[str, str]) -> str:
    compiler = values.get(CXX, "")
    if compiler and f"{compiler}{_SOURCE}" in command:
        command = command.replace(f"{compiler}{_SOURCE}", f"{CXX}{_SOURCE}", 1)
    # Longest value first, so a path nested in another is not cut in half.
    paths = {k: v for k, v in values.items() if k != CXX}
    for placeholder, value in sorted(paths.items(), key=lambda kv: -len(kv[1])):
        if value:
            command = command.replace(value, placeholder)
    return command


def render(template: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        template = template.replace(placeholder, value)
    return template


def code_key(source: str, extra: str) -> str:
    """Inductor's ``code_hash(source.strip(), extra)``."""
    hasher = hashlib.sha256(source.strip().encode("utf-8"))
    if extra:
        hasher.update(b"||")
        hasher.update(extra.encode("utf-8"))
    return "c" + base64.b32encode(hasher.digest())[:51].decode("ascii").lower()


def cache_relpath(key: str, suffix: str) -> str:
    """Where Inductor keeps ``<key><suffix>`` inside its cache dir."""
    return os.path.join(key[1:3], key + suffix)
