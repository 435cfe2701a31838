"""What a build's workloads compiled: report-only data, parsed by the tools and never by ``load()``.

The child measures each workload (child/observe.py); the manifest keeps the records as written
(Manifest.workloads, Manifest.keys); ``report``, ``why`` and ``snoop`` read them through ``of``
and ``unpack_keys``, tolerant of what any version wrote.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Graph:
    """One graph a workload compiled, from torch's compilation metrics."""

    compile_id: str | None = None
    kind: str = "forward"  # or "backward"
    function: str | None = None
    location: str | None = None  # file:line of the compiled function
    seconds: float = 0.0
    inductor_seconds: float | None = None
    ops: int | None = None
    recompile_reason: str | None = None
    fail_reason: str | None = None
    aot_hits: int = 0
    aot_misses: int = 0
    fx_hits: int = 0
    fx_misses: int = 0
    inputs: list[dict[str, Any]] | None = None  # the call it was compiled for: name, shape, dtype, requires_grad
    grad_mode: bool | None = None
    # Dynamo's tracing of this frame thrown away by a restart (a graph break): paid at every start,
    # warm ones too, for the artifacts skip compiling, not tracing.
    restart_seconds: float = 0.0
    restart_reasons: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Workload:
    """What one workload compiled at build time, and what it cost (``report`` shows it)."""

    name: str
    seconds: float = 0.0
    counters: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    graphs: list[Graph] | None = None  # None: not recorded by the version that built it
    graph_breaks: list[dict[str, str]] = dataclasses.field(default_factory=list)
    recompiles: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    float64: list[dict[str, Any]] | None = None  # None: not recorded by the version that built it
    kernels: int | None = None
    cache_bytes: int | None = None

    @property
    def unique_graphs(self) -> int:
        return self.counters.get("stats", {}).get("unique_graphs", 0)

    @classmethod
    def from_dict(cls, w: dict[str, Any]) -> "Workload":
        graphs = w.get("graphs")
        return cls(
            name=w.get("name") or "?", seconds=w.get("seconds") or 0.0, counters=w.get("counters") or {},
            graphs=None if graphs is None else [_known(Graph, g) for g in graphs if isinstance(g, dict)],
            graph_breaks=w.get("graph_breaks") or [], recompiles=w.get("recompiles") or [],
            float64=w.get("float64"), kernels=w.get("kernels"), cache_bytes=w.get("cache_bytes"),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def of(manifest: Any) -> list[Workload]:
    """The manifest's workloads, typed (records any version wrote; odd parts are left out)."""
    return [w if isinstance(w, Workload) else Workload.from_dict(w) for w in manifest.workloads
            if isinstance(w, (dict, Workload))]


def normalize(record: dict[str, Any]) -> dict[str, Any]:
    """A child's record of one workload as the manifest keeps it: the fields a Workload has."""
    return Workload.from_dict(record).to_dict()


def pack_keys(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The manifest's ``keys``: fields every entry shares once in ``common``, the rest per entry."""
    if not entries:
        return None
    common = dict(entries[0]["fields"])
    for e in entries[1:]:
        common = {k: v for k, v in common.items() if e["fields"].get(k) == v}
    return {"common": common, "entries": [
        {**e, "fields": {k: v for k, v in e["fields"].items() if k not in common}} for e in entries
    ]}


def unpack_keys(keys: Any) -> list[dict[str, Any]]:
    """Entries with their whole fields, from a manifest's ``keys`` (written by any version: a part
    that is not what we expect is left out, never raised on)."""
    if not isinstance(keys, dict) or not isinstance(keys.get("entries"), list):
        return []
    common: dict[str, Any] = keys["common"] if isinstance(keys.get("common"), dict) else {}
    out = []
    for e in keys["entries"]:
        if isinstance(e, dict) and isinstance(e.get("fields"), dict):
            out.append({**e, "fields": {**common, **e["fields"]}, "sources": e.get("sources") or {}})
    return out


def _known(kind: type, data: dict[str, Any]) -> Any:
    """``kind(**data)`` keeping only the fields ``kind`` has (a newer writer may add some)."""
    names = {f.name for f in dataclasses.fields(kind)}
    return kind(**{k: v for k, v in data.items() if k in names})


