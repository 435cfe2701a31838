"""The fix a skip message gives: the command that rebuilds this package for this environment, the
way it was installed.

An installed distribution says who installed it (``INSTALLER``: pip, uv) and from where
(``direct_url.json``, PEP 610: a project dir, an sdist or wheel file or URL; none: an index). The
fix reinstalls it from that source, as that installer would, with the caches that could hand back
the old wheel turned off (pip caches wheels it built from an index's sdist, uv those it built
from a dir): the installer builds it again, and the build finds this environment's torch.
``hatch-precompile warm`` is the fix where there is no source to build (a wheel from an index or
a file). Only on the skip path; standard library only.
"""

from __future__ import annotations

import json
import shlex
import sys
from importlib import metadata
from urllib.parse import unquote, urlparse


def rebuild(package: str) -> str:
    """One sentence: how to get artifacts for this environment."""
    warm = f"run `hatch-precompile warm {package}`"
    command = reinstall_command(package)
    if command is None:
        return f"rebuild the wheel for this environment (a `pip install` of the project's source does) or {warm}"
    return f"reinstall it from source, which builds for this environment: `{command}`; or {warm}"


def reinstall_command(package: str) -> str | None:
    """The installer's command that builds and reinstalls ``package``'s distribution here, or None."""
    dist = _distribution(package)
    if dist is None:
        return None
    name = dist.metadata["Name"]
    installer = (dist.read_text("INSTALLER") or "").strip()
    if not installer:
        return None  # not put there by an installer (an unpacked wheel): no way to tell its source
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        direct = None
    source, from_index = _source(direct, name)
    if source is None:
        return None
    python = shlex.quote(sys.executable)
    if installer == "uv":
        no_binary = f" --no-binary-package {name}" if from_index else ""
        return f"uv pip install --python {python} --reinstall-package {name} --no-deps --no-cache{no_binary} {source}"
    no_binary = f" --no-binary {name}" if from_index else ""
    return f"{python} -m pip install --force-reinstall --no-deps --no-cache-dir{no_binary} {source}"


def _source(direct: dict | None, name: str) -> tuple[str | None, bool]:
    """(what to install, whether from an index) from PEP 610's direct_url.json."""
    if not isinstance(direct, dict):
        return shlex.quote(name), True  # from an index: its sdist, built here
    url = direct.get("url")
    if not isinstance(url, str):
        return None, False
    if isinstance(direct.get("dir_info"), dict):
        if direct["dir_info"].get("editable"):
            return None, False  # an editable install ships no artifacts to fix
        parsed = urlparse(url)
        return shlex.quote(unquote(parsed.path) if parsed.scheme == "file" else url), False
    if url.endswith(".whl"):
        return None, False  # a built wheel: nothing to build from
    return shlex.quote(unquote(urlparse(url).path) if url.startswith("file:") else url), False


def _distribution(package: str) -> metadata.Distribution | None:
    top = package.split(".", 1)[0]
    for name in metadata.packages_distributions().get(top, []):
        try:
            return metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
    return None
