"""The hook's table (``[tool.hatch.build.hooks.precompile]``) as typed, checked options.

One dataclass says everything about an option: its name in the table, its type and default, its
check, its JSON schema and its documentation (each field's metadata); the list of known names, the
parser, the README's table and the published schema (builder/settings_schema.py) all derive from it.
Backend-neutral: a dict in, Options out, or one OptionError naming every bad option, each line
saying what was expected and what was found (and, for a name it does not know, which one was meant).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from typing import Any, Callable

from hatch_precompile.errors import OptionError
from hatch_precompile.protocol import (
    CPU_TARGETS,
    DECLARATION_FORMAT,
    DEFAULT_TIMEOUT,
    DEVICES,
    DOTTED_NAME,
    ON_FAILURE,
    WORKLOAD,
    Declaration,
)

CHECKS = ("off", "warn", "error")
CAPABILITY = re.compile(r"[a-z][a-z0-9_]*")  # what ATEN_CPU_CAPABILITY takes: default, avx2, avx512, ...
# Keys hatchling itself reads from every hook table.
RESERVED = frozenset(
    {"dependencies", "require-runtime-dependencies", "require-runtime-features", "enable-by-default"}
)


Check = Callable[[Any, "Bad"], Any]  # (the value as written, a way to reject it) -> the typed value


class Bad:
    """Rejects one option's value: ``raise bad("a boolean")``, naming the option as ``subject`` says
    (the hook's table, bake's ``[tool.hatch-precompile]`` of a file, a command line's flag)."""

    def __init__(self, subject: str, value: Any) -> None:
        self.subject, self.value = subject, value

    def __call__(self, expected: str) -> OptionError:
        return OptionError(f"{self.subject} must be {expected}, got {self.value!r}")

    def entry(self, entry: Any, expected: str) -> OptionError:
        return OptionError(f"{self.subject}: entry {entry!r} must {expected}")


def _option(name: str, default: Any, check: Check, doc: str, schema: dict[str, Any]) -> Any:
    """A field of Options: ``schema`` is the JSON schema of what ``check`` accepts, for editors and
    validate-pyproject (tests/unit/test_schema.py holds the two to the same values)."""
    return dataclasses.field(default=default, metadata={"option": name, "check": check, "doc": doc, "schema": schema})


def _enum(choices: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "string", "enum": list(choices)}


_WORKLOAD_SCHEMA = {"type": "string", "pattern": f"^{WORKLOAD.pattern}$"}


def _workloads(value: Any, bad: Bad) -> tuple[str, ...]:
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise bad("a string or an array of strings")
    for workload in value:
        if not WORKLOAD.fullmatch(workload):
            raise bad.entry(workload, "look like 'package.module:function'")
    return tuple(value)


def _boolean(value: Any, bad: Bad) -> bool:
    if not isinstance(value, bool):
        raise bad("a boolean")
    return value


def _seconds(value: Any, bad: Bad) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise bad("a positive number of seconds")
    return float(value)


def _one_of(choices: tuple[str, ...]) -> Check:
    def check(value: Any, bad: Bad) -> str:
        if value not in choices:
            raise bad(f"one of {', '.join(choices)}")
        return value

    return check


def _package(value: Any, bad: Bad) -> str:
    if not (isinstance(value, str) and DOTTED_NAME.fullmatch(value)):
        raise bad("an importable package name")
    return value


def _directory(value: Any, bad: Bad) -> str:
    if not isinstance(value, str) or not value.strip():
        raise bad("a directory (a path, relative to the project)")
    return value


def _capabilities(value: Any, bad: Bad) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(c, str) and CAPABILITY.fullmatch(c.lower()) for c in value):
        raise bad('an array of ATEN_CPU_CAPABILITY names (e.g. ["default", "avx2"])')
    return tuple(dict.fromkeys(c.lower() for c in value))


@dataclasses.dataclass(frozen=True)
class Options:
    workloads: tuple[str, ...] = _option(
        "workload", (), _workloads,
        '`"module:callable"` or a list of them, run in order in one child process',
        {"oneOf": [_WORKLOAD_SCHEMA, {"type": "array", "items": _WORKLOAD_SCHEMA}]})
    enable: bool = _option(
        "enable", True, _boolean, "the default; the environment switches below override it", {"type": "boolean"})
    timeout: float = _option(
        "timeout", DEFAULT_TIMEOUT, _seconds,
        "seconds for all workloads together; the child and everything it started is killed after",
        {"type": "number", "exclusiveMinimum": 0})
    on_failure: str = _option(
        "on-failure", "error", _one_of(ON_FAILURE),
        '`"warn"`: a failing or timed-out workload builds a plain wheel instead of failing the build',
        _enum(ON_FAILURE))
    package: str | None = _option(
        "package", None, _package, "the package that ships `_precompiled/` and calls `load()`",
        {"type": "string", "pattern": f"^{DOTTED_NAME.pattern}$"})
    cpu_capabilities: tuple[str, ...] = _option(
        "cpu-capabilities", (), _capabilities,
        'e.g. `["default", "avx2", "avx512"]`: one artifact set per `ATEN_CPU_CAPABILITY` the build machine can '
        "run, all in one wheel; `load()` picks the process's (see [Fleets](docs/guide/fleets.md))",
        {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_]*$"}})  # any case
    graph_breaks: str = _option(
        "graph-breaks", "off", _one_of(CHECKS),
        '`"warn"` or `"error"`: the build warns or fails when the workload shows a graph break, each listed with '
        "its `file:line` and fix -- a package's CI catches a new one the day it appears", _enum(CHECKS))
    recompiles: str = _option(
        "recompiles", "off", _one_of(CHECKS),
        "likewise for recompiles from unstable shapes, dtypes or Python scalars (the training-then-inference "
        "grad-mode recompile is expected and passes)", _enum(CHECKS))
    device: str = _option(
        "device", "auto", _one_of(DEVICES),
        '`"cuda"`: the workloads need a GPU; without a usable one the build says why before running them, then '
        '`on-failure` applies. `"cpu"`: the GPUs are hidden from the workloads (`CUDA_VISIBLE_DEVICES=""`), for a '
        'wheel with CPU artifacts built on a GPU machine. `"auto"`: as the machine is, and a workload failing for '
        "want of CUDA gets the same explanation", _enum(DEVICES))
    dynamo_cache: bool = _option(
        "dynamo-cache", True, _boolean,
        "the workloads run a second time under torch's `caching_precompile`, and the package's own "
        "`torch.compile` calls are served from those Dynamo cache entries, untraced, every guard kept (torch 2.10+; "
        "see [loading](docs/reference/loading.md#compiled-functions-served-untraced)); `false`: a faster build, "
        "whose compiled functions are traced at their first call", {"type": "boolean"})
    cpu_target: str = _option(
        "cpu-target", "portable", _one_of(CPU_TARGETS),
        '`"portable"`: kernels built without `-march=native`, for every CPU with the vector ISA Inductor picks; '
        '`"native"`: with it, for CPUs that have every feature of the build machine\'s (see [On the user\'s '
        "machine](docs/guide/users-machines.md))", _enum(CPU_TARGETS))
    torch_trace: str | None = _option(
        "torch-trace", None, _directory,
        "a directory, relative to the project: torch's structured trace of the workloads (`TORCH_TRACE`) goes "
        "there, one subdirectory per CPU capability when there are several; where "
        "[tlparse](https://github.com/pytorch/tlparse) is installed, the build renders it to `html/index.html` "
        "beside it, what compiled and why, and prints the path. `HATCH_PRECOMPILE_TORCH_TRACE` overrides it "
        "(see [CI recipes](docs/guide/ci.md))",
        {"type": "string", "pattern": "\\S"})

    @property
    def import_package(self) -> str | None:
        """The package that ships ``_precompiled/`` and calls ``load()``."""
        if self.package:
            return self.package
        if self.workloads:
            return self.workloads[0].split(":", 1)[0].split(".", 1)[0]
        return None


FIELDS = {f.metadata["option"]: f for f in dataclasses.fields(Options)}
KNOWN = tuple(sorted(FIELDS))


def parse(table: dict[str, Any], hook: str, where: str | None = None) -> Options:
    """Options from the hook's table (or, ``where`` given, a ``[tool.hatch-precompile]`` table of that
    file); raises one OptionError naming every bad option, a line each."""
    place = f"for build hook `{hook}`" if where is None else f"in {where}"
    problems: list[str] = []
    values = {}
    for name, field in FIELDS.items():
        if name in table:
            try:
                values[field.name] = field.metadata["check"](table[name], Bad(f"Option `{name}` {place}", table[name]))
            except OptionError as exc:
                problems += exc.problems
    unknown = sorted(set(table) - set(KNOWN) - (RESERVED if where is None else set()))  # hatchling's, in its table
    problems += [unknown_option(name, place, reserved=where is None) for name in unknown]
    if unknown:
        problems.append(f"Known options {place}: {', '.join(KNOWN)}")
    if problems:
        raise OptionError(*problems)
    return Options(**values)


# A wheel's declaration (protocol/declaration.py) holds these options, read back with the table's
# own checks: its field -> the option's name.
DECLARED = {"package": "package", "workloads": "workload", "timeout": "timeout", "device": "device"}


def read_declaration(text: str, where: str) -> Declaration | None:
    """The declaration in ``text`` (``where`` names the file), or None where there is none or it is
    of another format than this version writes; raises one OptionError naming every bad field."""
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise OptionError(f"{where} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != DECLARATION_FORMAT:
        return None
    problems: list[str] = []
    values = {}
    for attribute, option in DECLARED.items():
        if attribute not in data:
            if attribute in ("package", "workloads"):  # the rest have defaults
                problems.append(f"`{attribute}` in {where} is missing")
            continue
        try:
            values[attribute] = check_option(option, data[attribute], f"`{attribute}` in {where}")
        except OptionError as exc:
            problems += exc.problems
    if problems:
        raise OptionError(*problems)
    return Declaration(**values)


def unknown_option(name: str, place: str, reserved: bool = True) -> str:
    """The line for an option nobody reads, with the known one it was meant to be, if one is close
    (``timeot`` -> ``timeout``; hatchling's own keys count, where the table is a hook's)."""
    candidates = [*KNOWN, *(sorted(RESERVED) if reserved else [])]
    meant = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f"Unknown option `{name}` {place}" + (f": did you mean `{meant[0]}`?" if meant else "")


def check_option(name: str, value: Any, spelled: str) -> Any:
    """One option's value through its check, the error naming it as ``spelled`` (a command line's
    ``--cpu-capabilities``) rather than as the hook's table does."""
    return FIELDS[name].metadata["check"](value, Bad(spelled, value))


def documentation() -> str:
    """The README's table of options, from the dataclass."""
    rows = ["| option | default | meaning |", "|---|---|---|"]
    special = {"workload": "required", "package": "the workload's top-level package", "cpu-capabilities": "the machine's",
               "torch-trace": "none"}
    for name, field in FIELDS.items():
        rows.append(f"| `{name}` | {special.get(name) or f'`{_toml(field.default)}`'} | {field.metadata['doc']} |")
    return "\n".join(rows) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
