"""The settings' JSON schema, made from the options' dataclass (options.py), and the plugins that
publish it to validate-pyproject, as scikit-build-core publishes its own.

``generate()`` makes the schema of ``[tool.hatch-precompile]`` (the table ``bake`` reads), with the
hook's table and a ``tool.hatch`` that holds it under ``definitions``; the file beside this module
is that document, committed (editors and SchemaStore read it; tests/unit/test_schema.py fails when
it drifts from the code: ``python -m hatch_precompile.builder.settings_schema`` rewrites it).

validate-pyproject (``validate_pyproject.tool_schema`` entry points) hands each plugin one table
under ``tool``, by name: a plugin cannot reach ``[tool.hatch.build.hooks.precompile]`` without
answering for all of ``tool.hatch``. So ``hatch_schema`` does that, lightly: every table and key of
hatch's is let through, and only the precompile hook's tables (``tool.hatch.build.hooks.precompile``
and ``tool.hatch.build.targets.<target>.hooks.precompile``) are checked. It has the lowest
priority: a schema of hatch's own for ``tool.hatch``, from any other plugin, wins over it.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from typing import Any

SCHEMA_FILE = "hatch-precompile.schema.json"
DRAFT = "http://json-schema.org/draft-07/schema#"  # validate-pyproject's own
# Names, not addresses (.invalid is reserved for that): the document ships in the wheel. An http(s)
# name, because fastjsonschema resolves a "#/definitions/..." reference only against one.
ID = "https://hatch-precompile.invalid/schema/settings.json"
HATCH_ID = "https://hatch-precompile.invalid/schema/tool-hatch.json"
# hatchling's own keys of every hook table (options.RESERVED), as hatchling reads them.
HATCHLING_KEYS = {
    "dependencies": {"type": "array", "items": {"type": "string"},
                     "description": "hatchling's: requirements the build environment needs for the hook"},
    "require-runtime-dependencies": {"type": "boolean", "description": "hatchling's: the project's dependencies too"},
    "require-runtime-features": {"type": "array", "items": {"type": "string"},
                                 "description": "hatchling's: the project's optional dependencies of these extras too"},
    "enable-by-default": {"type": "boolean", "description": "hatchling's: run the hook unless asked for"},
}


def _options() -> dict[str, Any]:
    """Each option's schema, with its documentation and default, in the dataclass's order."""
    from hatch_precompile.builder import options

    properties: dict[str, Any] = {}
    for name, field in options.FIELDS.items():
        schema = dict(field.metadata["schema"])
        schema["description"] = field.metadata["doc"]
        default = field.default
        if default not in (None, ()):
            schema["default"] = int(default) if isinstance(default, float) and default.is_integer() else default
        properties[name] = schema
    assert set(properties) == set(options.KNOWN) and set(HATCHLING_KEYS) == options.RESERVED
    return properties


def generate() -> dict[str, Any]:
    """The whole document: ``[tool.hatch-precompile]`` at its root, the hook's table and ``tool.hatch``
    under ``definitions``."""
    options = _options()
    hook = {"type": "object", "additionalProperties": False, "properties": {**options, **HATCHLING_KEYS},
            "description": "The hatchling build hook's table, [tool.hatch.build.hooks.precompile]: run the "
                           "workload at wheel build and ship what it compiled."}
    hooks = {"type": "object", "properties": {"precompile": {"$ref": "#/definitions/hook"}}}
    hatch = {"type": "object", "description": "hatch's table, checked only where the precompile hook's tables are.",
             "properties": {"build": {"type": "object", "properties": {
                 "hooks": hooks,
                 "targets": {"type": "object", "additionalProperties": {"type": "object", "properties": {"hooks": hooks}}},
             }}}}
    return {
        "$schema": DRAFT,
        "$id": ID,
        "$comment": f"made from hatch_precompile/builder/options.py; shipped as hatch_precompile/builder/{SCHEMA_FILE}",
        "title": "hatch-precompile",
        "description": "[tool.hatch-precompile]: the workload and options `hatch-precompile bake` reads for a wheel "
                       "another build backend made; the same options as the build hook's table.",
        "type": "object",
        "additionalProperties": False,
        "properties": options,
        "definitions": {"hook": hook, "hatch": hatch},
    }


def stored() -> dict[str, Any]:
    """The committed document."""
    return json.loads(resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def tool_schema(tool_name: str = "hatch-precompile") -> dict[str, Any]:
    """hatch-precompile's settings, ``[tool.$tool]``: the table `hatch-precompile bake` reads."""
    assert tool_name == "hatch-precompile", tool_name
    return stored()


def hatch_schema(tool_name: str = "hatch") -> dict[str, Any]:
    """hatch-precompile's build hook, ``[tool.$tool.build.hooks.precompile]`` (the rest of ``[tool.$tool]``
    is hatch's: not checked here)."""
    assert tool_name == "hatch", tool_name
    document = stored()
    return {"$schema": DRAFT, "$id": HATCH_ID, **document["definitions"]["hatch"],
            "definitions": {"hook": document["definitions"]["hook"]}}


hatch_schema.priority = -1  # type: ignore[attr-defined]  # any other plugin's tool.hatch wins


def text() -> str:
    return json.dumps(generate(), indent=2) + "\n"


if __name__ == "__main__":  # python -m hatch_precompile.builder.settings_schema: rewrite the committed file
    target = resources.files(__package__).joinpath(SCHEMA_FILE)
    with resources.as_file(target) as path:
        path.write_text(text(), encoding="utf-8")
    sys.stdout.write(f"wrote {target}\n")
