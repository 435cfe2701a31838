"""The manifest shipped beside the artifacts: its layout, writing it, and distrusting it.

Layout of ``<package>/_precompiled/`` in a wheel::

    manifest.json              this file's subject
    megacache.bin              torch.compiler.save_cache_artifacts() bytes
    inductor/...               the workload's Inductor cache dir (FX graph, AOTAutograd, kernels)
    torchscript/<name>.pt      modules recorded with save_torchscript()
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from pathlib import Path
from typing import Any

FORMAT = 1
DIRNAME = "_precompiled"
FILENAME = "manifest.json"
INDUCTOR_DIR = "inductor"
MEGACACHE_FILE = "megacache.bin"
TORCHSCRIPT_DIR = "torchscript"


class ManifestError(Exception):
    """The manifest cannot be trusted; nothing it names is used."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def describe_files(root: Path) -> dict[str, dict[str, Any]]:
    """size and sha256 of every regular file under ``root``, keyed by posix relative path."""
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != FILENAME:
            data = path.read_bytes()
            files[path.relative_to(root).as_posix()] = {"size": len(data), "sha256": sha256(data)}
    return files


def write(root: Path, manifest: dict[str, Any]) -> None:
    (root / FILENAME).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def is_safe_relpath(path: Any) -> bool:
    """A plain relative posix path that stays inside the manifest's directory."""
    if not isinstance(path, str) or not path or "\\" in path or "\x00" in path:
        return False
    if path.startswith("/") or posixpath.normpath(path) != path:
        return False
    return ".." not in path.split("/")


def parse(raw: bytes) -> dict[str, Any]:
    try:
        manifest = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"manifest.json does not parse: {exc}") from None
    if not isinstance(manifest, dict):
        raise ManifestError("manifest.json is not an object")
    if manifest.get("format") != FORMAT:
        raise ManifestError(
            f"manifest format {manifest.get('format')!r} is not the supported format {FORMAT}"
        )
    if not isinstance(manifest.get("env"), dict):
        raise ManifestError("manifest has no environment key")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise ManifestError("manifest has no file list")
    for path, entry in files.items():
        if not is_safe_relpath(path):
            raise ManifestError(f"manifest names a path outside its directory: {path!r}")
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("size"), int)
            and isinstance(entry.get("sha256"), str)
        ):
            raise ManifestError(f"manifest entry for {path!r} lacks size or sha256")
    for kernel in manifest.get("kernels", []):
        if not (
            isinstance(kernel, dict)
            and kernel.get("source") in files
            and all(f in files for f in kernel.get("files", [None]))
            and isinstance(kernel.get("key"), str)
            and isinstance(kernel.get("command"), str)
        ):
            raise ManifestError(f"manifest kernel entry is malformed: {kernel!r}")
    return manifest
