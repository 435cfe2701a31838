"""A guard manager in words: the lines torch prints for it, each guard with the value it holds to,
and nothing that differs between two processes holding the same guards (an object's address).

Torch rebuilds a shipped guarded code's guards when it installs the entry, from the guards'
serialized state. A value that state holds by reference -- an attribute of a module (``config.SCALE``),
of a class, a function's defaults -- is read again then, in the user's process: its guard holds the
value found there, not the one the build's trace read, and so never fails where they differ. The
build's second pass writes each guarded code's guards as torch rebuilds them at the moment it
traced it; the install compares them with the guards torch rebuilt here, line by line, and a guarded
code whose guards differ is never run (run/torch_internals/served/dynamo_cache.py).
"""

from __future__ import annotations

import ast
import json
import re
import zlib
from typing import Any

from hatch_precompile.run.torch_internals.registry import lookup

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_OBJECT_ID = re.compile(r"(___check_(?:type|obj)_id\(.*?), -?\d+\)")
_THREADS = re.compile(r'"num_threads":\s*\d+')
# The source line torch quotes after a guard (``  # <line>  # <file>:<n> in <function>``, or
# ``  # <unknown>``): which frame it names depends on where torch is installed, not on the guard.
_QUOTED = re.compile(r"  # (?:.*?  # )?[^#]*?:\d+ in [^\s()]+|  # <unknown>")
_TREE = re.compile(r"^[| ]*\+- ")
_BRACES = re.compile(r"\{[^{}]*\}")


def lines(manager: Any) -> list[str] | None:
    """``manager``'s guards as torch prints them, object ids and addresses left out; None where they
    cannot be read."""
    lookup("guard-text", "read")
    try:
        text = str(manager)
    except Exception:
        return None
    if "RootGuardManager" not in text:  # not the tree torch prints: nothing to compare
        return None
    return [_plain(line) for line in text.splitlines()]


def _plain(line: str) -> str:
    """One line with what differs between processes left out (each pattern tried only where its
    text can be: a thousand lines a guarded code, read at a first call)."""
    if "___check_" in line:
        line = _OBJECT_ID.sub(r"\1, <id>)", line)
    if "0x" in line:
        line = _ADDRESS.sub("0x?", line)
    if "  # " in line:
        line = _QUOTED.sub("", line)
    return _sets_sorted(line.rstrip())


def _sets_sorted(line: str) -> str:
    """``line`` with each set of constants it prints in sorted order: a set of strings prints in the
    order of their hashes, which differ from one process to the next (``PYTHONHASHSEED``), where
    the guard holds the same set (diffusers' ``_supported_arg_names``)."""
    if "{" not in line:
        return line

    def sorted_set(found: re.Match[str]) -> str:
        try:
            value = ast.literal_eval(found.group(0))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return found.group(0)
        if not isinstance(value, set):
            return found.group(0)
        return "{" + ", ".join(sorted(repr(element) for element in value)) + "}"

    return _BRACES.sub(sorted_set, line)


def difference(build: list[str], here: list[str], any_threads: bool) -> str | None:
    """Where the guards torch rebuilt here are not the build's, in words; None where they are.
    ``any_threads``: the kernels read the thread count when they run, so it may differ."""
    if any_threads:
        build, here = ([_THREADS.sub('"num_threads":?', line) for line in side] for side in (build, here))
    if build == here:
        return None
    for mine, theirs in zip(here, build):
        if mine != theirs:
            return f"a guard holds `{_guard(mine)}` here where the build's trace held `{_guard(theirs)}`"
    extra = here[len(build):] or build[len(here):]
    return f"a guard {'here' if len(here) > len(build) else 'of the build'} has no match: `{_guard(extra[0])}`"


def packed(by_code: dict[str, list[str]]) -> bytes:
    """Each guarded code's lines (by the digest of its guards' state), as the file the set ships."""
    return zlib.compress(json.dumps(by_code, sort_keys=True).encode(), 6)


def unpacked(data: bytes) -> dict[str, list[str]]:
    """``packed``'s file read back; ValueError where it is not one."""
    try:
        found = json.loads(zlib.decompress(data))
    except (zlib.error, ValueError) as exc:
        raise ValueError(f"the guards file does not read back: {exc}") from None
    if not isinstance(found, dict) or not all(isinstance(v, list) and all(isinstance(s, str) for s in v)
                                              for v in found.values()):
        raise ValueError("the guards file is not lines by guarded code")
    return found


def _guard(line: str) -> str:
    """A guard's line without torch's tree (or a source line it quotes)."""
    return _QUOTED.sub("", _TREE.sub("", line)).strip()
