"""Schemas as dataclasses whose fields say how their JSON is read: one check per field.

As builder/options.py does for the hook's table: each field's metadata holds its ``check`` (the JSON
value in, the typed value out, or an error naming the field) and its ``doc``; ``parse`` and the
generated docs (docs/reference/manifest.md) derive from them, so a field is written once. A value that is
absent (or null) takes the field's default; a ``required`` field's check sees it anyway and says
what is missing. Keys a schema does not know are ignored: a newer writer may add some.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

Check = Callable[[Any], Any]
_NO_DEFAULT: Any = dataclasses.MISSING


def field(check: Check, doc: str, *, default: Any = _NO_DEFAULT, factory: Callable[[], Any] | None = None,
          required: bool = False, report_only: bool = False) -> Any:
    """A schema field: its check, its documentation, and whether only the tools read it. A field
    whose check is ``anything`` is a record: kept, shown, never decided on."""
    metadata = {"check": check, "doc": doc, "required": required, "report_only": report_only}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def parse(kind: type, data: dict[str, Any], lenient: dict[str, Any] | None = None) -> Any:
    """``kind`` from its JSON object ``data``, every field through its check. ``lenient``: a field
    whose check fails takes its default (a required one, the value given there) instead of
    raising: what a report shows of a manifest that load() refuses."""
    values = {}
    for f in dataclasses.fields(kind):
        raw = data.get(f.name)
        if raw is None and not f.metadata.get("required"):
            continue  # the default
        try:
            values[f.name] = f.metadata["check"](raw)
        except Exception:
            if lenient is None:
                raise
            if f.name in lenient:
                values[f.name] = lenient[f.name]
    return kind(**values)


def documentation(kind: type, title: str) -> str:
    """A Markdown table of ``kind``'s fields: name, who reads it, meaning."""
    rows = [f"### {title}", "", "| field | read by | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(kind):
        if "doc" not in f.metadata:
            continue
        check = f.metadata["check"]
        reader = ("the tools only, as written" if f.metadata.get("report_only") else
                  "a record: shown, never decided on" if check in (anything, mapping_or_none, mapping) else
                  "`load()`, checked")
        rows.append(f"| `{f.name}` | {reader} | {f.metadata['doc']} |")
    return "\n".join(rows) + "\n"


# -- checks that many fields share ---------------------------------------------------------------


def anything(value: Any) -> Any:
    """Kept as written (a record for people and tools: nothing decides on it)."""
    return value


def mapping_or_none(value: Any) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, dict) else None


def mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def records(value: Any) -> list[dict[str, Any]]:
    """A list of JSON objects; anything else in it is left out."""
    return [dict(item) for item in value if isinstance(item, dict)] if isinstance(value, list) else []
