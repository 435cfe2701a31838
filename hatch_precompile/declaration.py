"""The workload declaration every wheel carries in ``.dist-info/extra_metadata/``, precompiled or not.

A ``PRECOMPILE=0`` wheel (or an index's plain wheel) ships no manifest, yet
``hatch-precompile warm`` must know what to run: the build records the hook's table here::

    {"format": 1, "package": "mypkg", "workloads": ["mypkg.warmup:run"], "timeout": 1800.0}
"""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any

FORMAT = 1
FILENAME = "hatch-precompile.json"
PATH = f"extra_metadata/{FILENAME}"  # inside the .dist-info dir


def dumps(package: str, workloads: list[str], timeout: float) -> str:
    data = {"format": FORMAT, "package": package, "workloads": workloads, "timeout": timeout}
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def of_package(package: str) -> tuple[dict[str, Any], str] | None:
    """(declaration, where it was read) of the installed distribution that ships ``package``."""
    top = package.split(".", 1)[0]
    for name in metadata.packages_distributions().get(top, []):
        try:
            dist = metadata.distribution(name)
            text = dist.read_text(PATH)
        except (metadata.PackageNotFoundError, OSError):
            continue
        if text is None:
            continue
        try:
            data = json.loads(text)
        except ValueError:
            continue
        if (
            isinstance(data, dict)
            and data.get("package") == package
            and isinstance(data.get("workloads"), list)
            and all(isinstance(w, str) for w in data["workloads"])
        ):
            return data, f"{name} {dist.version}'s {PATH}"
    return None
