"""Where the trace made each guard torch drops (a guard's ``user_stack``): said in the reason a
guarded code is traced (``made_at``), and read to hold the identity guards ``copy.deepcopy``'s
memo made by how their objects alias one another.

Traced, ``copy.deepcopy(x)`` calls ``id()`` on every object it visits, and Dynamo guards the
identity of each (ID_MATCH): an identity no new process can have, so the guarded code would be
traced (transformers' T5 deep-copies its config inside ``forward``). Where the copy module is one
read here (``KNOWN``, by digest), every ``id()`` it takes is a key of its memo and nothing else:
what the trace decided from those ids is only which visited objects are one and the same (an
object met twice is copied once). So such a guard, where its object cannot be described, is
recorded as that object's place among the others the memo keyed (``group``), and a call is served
only where its objects alias one another as the build's did (run/served/held_objects.py); what the trace
read of each object is held by torch's own guards, kept.

Only a guard made by the copy module's own code counts, from a caller's ``deepcopy(x)`` (no memo
of the caller's, which outlives the copy; no ``__deepcopy__`` of the package's in between, which
might keep the memo or read its keys), where the compiled code keeps none of the memo's ids
(``ids_kept``); and torch keeps a guard made at two places as two (``each_site_kept``), so an
identity also needed elsewhere (a user's ``is``) is its own guard, made there, and keeps the
guarded code traced.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import os
import sysconfig
import types
from typing import Any, Iterator

from hatch_precompile.protocol import dynamo_sources
from hatch_precompile.run.torch_internals.registry import lookup

# sha256 of the copy module's source, parsed and written back (ast.unparse): each takes id() only as a memo key
KNOWN = {
    "14f643937e9342a50a41be71662cdd4ceb7ce37ae1c69ae6d4a4fb977fcb5c3f",  # Python 3.10
    "171c5938fb6ce8b2e0ded2836594411739216c76a8495ee296e8c983c5094fa0",  # 3.11
    "3a6e5c8997acfbd4168535181fe86d1cfd0888cb97ee4caf5a037365b9716b3a",  # 3.12
    "c0c127ea3b430b43626d60a2bff2d3eb6ca4d6b27a491dece3d69a0746fd31fb",  # 3.13
}


def made_by_memo(source: str, guard_type: str, derived: tuple[str, ...], stack: Any) -> bool:
    """Whether an identity guard was made by deepcopy's memo: a plain ID_MATCH whose innermost
    frame is in a copy module read here, where torch keeps each place a guard is made, on a source
    evaluated here that finds the object itself (not ``dict(x.__dict__)``, a new dict each time)."""
    if guard_type != "ID_MATCH" or set(derived) - {"ID_MATCH"} or source.startswith("dict(") \
            or dynamo_sources.evaluator(source) is None:
        return False
    try:
        frames = list(stack or ())
        copying = [index for index, frame in enumerate(frames) if frame.filename == copy.__file__]
        # from the call of deepcopy to the id(), only the copy module's own code (no __deepcopy__ of
        # the package's, which may keep the memo or read its keys), called without a memo of the caller's
        if not copying or copying != list(range(copying[0], len(frames))) or copying[0] == 0:
            return False
        return _memo_of_its_own(frames[copying[0] - 1].line) and _copy_module_read() and each_site_kept()
    except Exception:  # a stack of another shape: not known to be the memo's
        return False


def _memo_of_its_own(line: str | None) -> bool:
    """Whether the caller's line calls deepcopy once, with the object alone (its memo made inside
    the copy, and dropped when it returns); a line that is not a whole statement does not say."""
    try:
        tree = ast.parse((line or "").strip())
    except SyntaxError:
        return False
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "deepcopy"]
    return len(calls) == 1 and len(calls[0].args) == 1 and not calls[0].keywords


def ids_kept(memo: dict[str, Any], code: Any) -> str | None:
    """Why the guards the memo made cannot be held so, where the compiled code ``code`` (a guarded
    code's bytecode) holds the id of an object the memo keyed as a constant (the memo or its keys
    left the compiled region, and would carry the build's ids into the user's process); or None."""
    said = f"ID_MATCH guard on {next(iter(memo), '')} (deepcopy's memo, whose ids its compiled code keeps)"
    if not memo:
        return None
    if not isinstance(code, types.CodeType):
        return said  # not read: kept, for all this can tell

    def constants(value: Any) -> Iterator[Any]:
        if isinstance(value, types.CodeType):
            for each in value.co_consts:
                yield from constants(each)
        elif isinstance(value, (tuple, frozenset)):
            for each in value:
                yield from constants(each)
        else:
            yield value

    ids = {id(found) for found in memo.values()}
    return said if any(type(value) is int and value in ids for value in constants(code)) else None


def grouped(memo: dict[str, Any]) -> list[dict[str, Any]]:
    """The guards the memo made, by source (-> its object), as the index keeps them: each object's
    group, the first source's index among those holding the very same object."""
    first: dict[int, int] = {}
    return [{"source": source, "type": "ID_MATCH", "code": False,
             "described": {"kind": dynamo_sources.DEEPCOPY_MEMO, "group": first.setdefault(id(found), index)}}
            for index, (source, found) in enumerate(memo.items())]


@functools.cache
def _copy_module_read() -> bool:
    with open(copy.__file__, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    return hashlib.sha256(ast.unparse(tree).encode()).hexdigest() in KNOWN


@functools.cache
def each_site_kept() -> bool:
    """Whether torch keeps a guard made at two places as two guards, each with the stack it was made
    at (its ``Guard`` compares where it was made), so that a guard the memo made is no other's too.
    Tried on torch's own guard set, as Dynamo adds to it."""
    lookup("guard-sites", "read")
    try:
        import traceback

        from torch._dynamo.guards import GuardBuilder  # noqa: TID251  (the touchpoint's owner)
        from torch._dynamo.source import GlobalSource  # noqa: TID251
        from torch._guards import GuardsSet  # noqa: TID251

        made = GuardsSet()
        first = GlobalSource("x").make_guard(GuardBuilder.ID_MATCH)
        first.user_stack = traceback.StackSummary.from_list([("copy.py", 1, "deepcopy", "d = id(x)")])
        made.add(first)
        made.add(GlobalSource("x").make_guard(GuardBuilder.ID_MATCH))  # the same guard, made elsewhere
        return len(made) == 2
    except Exception:  # torch moved: no guard is taken for the memo's
        return False


def made_at(stack: Any) -> str | None:
    """Where the trace made a guard, in the traced code (a guard's ``user_stack``): its innermost
    frame, and the innermost outside Python's standard library where that is another one (the
    library line that called ``copy.deepcopy``, whose ``id(x)`` made an identity guard). None where
    torch kept no stack."""
    try:
        frames = list(stack or ())
        if not frames:
            return None
        stdlib = sysconfig.get_paths()["stdlib"]
        said = [_frame(frames[-1])]
        outside = next((f for f in reversed(frames) if not f.filename.startswith(stdlib)), None)
        if outside is not None and outside is not frames[-1]:
            said.append(f"called from {_frame(outside)}")
        return ", ".join(said)
    except Exception:  # torch's stack changed shape: the reason is said without it
        return None


def _frame(frame: Any) -> str:
    path = str(frame.filename)
    path = path.rpartition("site-packages/")[2] if "site-packages/" in path else os.path.basename(path)
    line = (frame.line or "").strip()
    return (f"`{line}` in " if line else "") + f"{frame.name} at {path}:{frame.lineno}"
