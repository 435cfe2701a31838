"""What shipped native code needs of the system, read from its ELF files, and the wheel tag that allows.

For every kernel binary, pyelftools reads the libraries it is linked against (``DT_NEEDED``) and
the symbol versions it needs of each (``.gnu.version_r``), with one symbol per version, so that
load() can ask the user's dynamic linker for exactly that symbol at that version (run/sets/machine.py).

The wheel tag: auditwheel's manylinux policies (its ``manylinux-policy.json``) say which
libraries a ``manylinux_2_X`` wheel may link against and which symbol versions of each. A
precompiled wheel's kernels also link against torch's own libraries (``libtorch_cpu.so``,
``libc10.so`` and the ``libgomp.so.1`` torch ships), as every torch extension does; those come
with the exact torch the environment key demands, and load() checks every library before the
first file is installed. So the wheel takes the most compatible manylinux tag whose policy allows
everything else, and stays ``linux_<arch>`` when a kernel needs a library neither the policy nor
torch provides.

auditwheel is a publishing tool, not in a user's install: the build hook asks for it through
hatchling's ``dependencies()`` (hatch/plugin.py), and ``bake`` users install the ``publish`` extra. A
build without isolation where it is missing (``pip install --no-build-isolation``, for that
environment's own install) takes the platform's own tag, ``linux_<arch>``, and says how to get
a manylinux one.
pyelftools is a runtime dependency: ``warm`` reads the kernels it compiles in the user's own
environment, as a build does.
"""

from __future__ import annotations

import importlib.util
import json
from importlib import resources
from pathlib import Path
from typing import Any

from hatch_precompile.errors import ElfUnreadable, MissingTool

ELF_MAGIC = b"\x7fELF"


# What the manylinux tag needs: hatch-precompile's `publish` extra (pyproject.toml), and what the build
# hook adds to the build environment.
PUBLISH_EXTRA = "publish"
PUBLISH_REQUIREMENTS = ("auditwheel>=6.1",)


def has_publishing_tools() -> bool:
    """Whether the tools that give a wheel its manylinux tag are importable here."""
    return importlib.util.find_spec("auditwheel") is not None


def require_publishing_tools(prefix: str = "") -> None:
    """Raise MissingTool, naming the extra, unless the tools that tag a wheel are importable."""
    if not has_publishing_tools():
        raise MissingTool(
            f"{prefix}the wheel's manylinux tag needs auditwheel's policies, and auditwheel is not installed "
            f"here: install hatch-precompile's publishing tools with: pip install 'hatch-precompile[{PUBLISH_EXTRA}]'"
        )


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == ELF_MAGIC
    except OSError:
        return False


def needs(path: Path) -> dict[str, dict[str, str]]:
    """{library: {symbol version: a symbol needing it}} of one ELF file; libraries without
    versioned symbols map to {}."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection

    try:
        with open(path, "rb") as handle:
            elf = ELFFile(handle)
            found: dict[str, dict[str, str]] = {}
            version_of: dict[int, tuple[str, str]] = {}  # vna_other index -> (library, version)
            versym = dynsym = None
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags("DT_NEEDED"):
                        found.setdefault(tag.needed, {})
                elif isinstance(section, GNUVerNeedSection):
                    for verneed, auxiliaries in section.iter_versions():
                        for aux in auxiliaries:
                            version_of[aux.entry.vna_other] = (verneed.name, aux.name)
                elif isinstance(section, GNUVerSymSection):
                    versym = section
                elif section.name == ".dynsym":
                    dynsym = section
            if versym is not None and dynsym is not None:
                for index, symbol in enumerate(dynsym.iter_symbols()):
                    if symbol.entry.st_shndx != "SHN_UNDEF" or not symbol.name:
                        continue
                    library, version = version_of.get(versym.get_symbol(index).entry.ndx, (None, None))
                    if library is not None and version is not None:
                        found.setdefault(library, {}).setdefault(version, symbol.name)
            return found
    except (ELFError, OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
        raise ElfUnreadable(f"{path.name}: {exc}") from None


def merge(into: dict[str, dict[str, str]], more: dict[str, dict[str, str]]) -> None:
    for library, versions in more.items():
        known = into.setdefault(library, {})
        for version, symbol in versions.items():
            known.setdefault(version, symbol)


def platform_tag(libraries: dict[str, dict[str, str]], torch_libraries: set[str], arch: str) -> tuple[str | None, str]:
    """(``manylinux_2_X_<arch>``, why) for the most compatible policy that allows ``libraries``
    beside the ones torch ships (``torch_libraries``), or (None, why not)."""
    if importlib.util.find_spec("auditwheel") is None:  # warm, in a user's install: no wheel to tag
        return None, f"auditwheel is not installed (hatch-precompile[{PUBLISH_EXTRA}])"
    try:
        policies = json.loads(resources.files("auditwheel.policy").joinpath("manylinux-policy.json").read_text())
    except (ModuleNotFoundError, OSError, ValueError) as exc:
        return None, f"auditwheel's manylinux policies cannot be read ({exc!r})"
    outside = sorted(lib for lib in libraries if lib not in torch_libraries)
    best, blocker = None, "no manylinux policy"
    for policy in sorted(policies, key=lambda p: -p.get("priority", 0)):
        if not policy["name"].startswith("manylinux_"):
            continue
        problem = _disallowed(policy, {lib: libraries[lib] for lib in outside}, arch)
        if problem is None:
            best = policy
            break
        blocker = problem
    if best is None:
        return None, blocker
    provided = sorted(set(libraries) & torch_libraries)
    return f"{best['name']}_{arch}", (f"{best['name']}: its libraries and symbol versions"
                                      + (f", besides torch's own {', '.join(provided)}" if provided else ""))


def _disallowed(policy: dict[str, Any], libraries: dict[str, dict[str, str]], arch: str) -> str | None:
    allowed_versions = policy.get("symbol_versions", {}).get(arch)
    if allowed_versions is None:
        return f"{policy['name']} has no policy for {arch}"
    for library, versions in libraries.items():
        if _dynamic_linker(library):
            continue  # on every system of its libc, and never judged by a policy (as auditwheel does)
        if library not in policy.get("lib_whitelist", []):
            return f"{library} is neither allowed by manylinux nor shipped with torch"
        for version in versions:
            prefix, _, number = version.partition("_")
            if number not in allowed_versions.get(prefix, []):
                return f"{library} {version} is newer than {policy['name']} allows"
    return None


def _dynamic_linker(library: str) -> bool:
    return library.startswith("ld-linux") or library in ("ld64.so.2", "ld64.so.1")


def wheel_platform(platforms: list[dict[str, Any] | None]) -> tuple[str | None, str]:
    """The least compatible of the sets' tags (every set's kernels must run where the wheel
    installs), or (None, why) when one allows none."""
    tags = []
    for found in platforms:
        if not found or not found.get("tag"):
            return None, (found or {}).get("why") or "a set records no platform"
        tags.append(found["tag"])
    if not tags:
        return None, "no set"
    newest = max(tags, key=_glibc)
    return newest, next(p["why"] for p in platforms if p and p.get("tag") == newest)


def _glibc(tag: str) -> tuple[int, int]:
    parts = tag.split("_")  # manylinux_2_24_x86_64
    try:
        return int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        return (99, 99)
