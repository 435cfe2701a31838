"""The objects a served entry's dropped identity guards are held to, found again by name at each call.

Torch serializes a guard manager without the guards it cannot pickle (an object's identity: ID_MATCH,
CLOSURE_MATCH). The build's index names each such guard's source (a path in Dynamo's grammar from
the globals ``G`` or the call's locals ``L``) and describes the object that was there
(protocol/dynamo_sources.py). Here each source is evaluated, its object described the same way,
and a guard made that holds the source to that very object, as Dynamo's own would have. The
identities ``copy.deepcopy``'s memo took are held otherwise: by which of their objects are one and
the same, as at build (builder/served/guard_sites.py). An optimizer is held by its class, and its
state made as the trace made it before its guards first see it (optimizer_state.py).
"""

from __future__ import annotations

import builtins
from typing import Any, Callable

from hatch_precompile.protocol import dynamo_sources
from hatch_precompile.run.served import optimizer_state


def held(dropped: list[dict[str, Any]], scope: dict[str, Any]) -> tuple[Callable[[Any], bool] | None, int | str]:
    """A guard holding each source of ``dropped`` to one object, as Dynamo's identity guard held it
    to the build's, and how many it holds; (None, why not) where one cannot be.

    A source in the code's globals is held to the object there now, once that object is described
    as the build's was. A source in the call's locals (``L['self'].__class__``) has no object until
    a call: the first call whose object there is described as the build's pins it, and every later
    call must bring that very object. Until one does, the guard fails and the call is traced. The
    sources deepcopy's memo keyed are held by how their objects alias instead (``_aliasing``). An
    optimizer is held by its class (``type(source) is`` the class, pinned as a local source is), and
    its state is made before the guards that hold it, where the build recorded the trace making it."""
    memo = [guard for guard in dropped if guard["described"].get("kind") == dynamo_sources.DEEPCOPY_MEMO]
    dropped = [guard for guard in dropped if guard["described"].get("kind") != dynamo_sources.DEEPCOPY_MEMO]
    aliasing = _aliasing(memo, scope)
    if isinstance(aliasing, str):
        return None, aliasing
    if not dropped:
        return aliasing, len(memo)
    pins: list[Any] = []
    tests, lazy, inits = [], [], []
    for index, guard in enumerate(dropped):
        source = guard["source"]
        compiled = dynamo_sources.evaluator(source)
        if compiled is None:
            return None, f"{source} is not a source this version evaluates"
        code, local = compiled
        path = f"({source}).__code__" if guard.get("code") else source  # CLOSURE_MATCH: its code, as Dynamo holds it
        optimizer = guard["described"].get("kind") == dynamo_sources.OPTIMIZER
        tests.append(f"type({path}) is _pins[{index}]" if optimizer else f"({path}) is _pins[{index}]")
        if guard.get("init"):
            inits.append((code, guard["init"]))
        if local or optimizer:
            pins.append(_UNPINNED)
            lazy.append((index, code, guard))
            continue
        try:
            current = _found(code, guard, scope, None)
        except Exception as exc:
            return None, f"{source} is not there ({exc!r})"
        if current is _UNPINNED:  # another object than the build's: a monkeypatch, another version
            return None, f"{path} is another object than the build's ({_what(_evaluate(code, scope, None))})"
        pins.append(current)
    namespace = {**dynamo_sources.SOURCE_HELPERS, "__builtins__": {}, "G": scope, "_pins": pins}
    test = eval(builtins.compile("lambda L: " + " and ".join(tests), "<hatch-precompile guards>", "eval"), namespace)
    refused: dict[int, Any] = {}  # the last object a lazy source brought that is not the build's

    def pin(frame_locals: Any) -> bool:
        """Pins each unpinned local source's object where it is the build's; whether any was pinned."""
        pinned = False
        for index, code, guard in lazy:
            if pins[index] is not _UNPINNED:
                continue
            current = _held(_evaluate(code, scope, frame_locals), guard)
            if index in refused and refused[index] is current:
                continue
            found = _found(code, guard, scope, frame_locals)
            if found is _UNPINNED:
                refused[index] = current
            else:
                pins[index], pinned = found, True
        return pinned

    def check(frame_locals: Any) -> bool:
        try:
            return aliasing(frame_locals) and (bool(test(frame_locals)) or (
                bool(lazy) and pin(frame_locals) and bool(test(frame_locals)))) and all(
                optimizer_state.made(_evaluate(code, scope, frame_locals), calls) for code, calls in inits)
        except Exception:  # a name deleted, an attribute gone: not the object the entry was made for
            return False

    return check, len(tests) + len(memo)


def _aliasing(memo: list[dict[str, Any]], scope: dict[str, Any]) -> Callable[[Any], bool] | str:
    """A guard that the objects at the sources of ``memo`` (the identity guards deepcopy's memo made)
    are one and the same exactly where the build's were: each source's group is the first source
    holding the very same object. Any object will do, so none is pinned; what the trace read of
    each is held by torch's own guards."""
    if not memo:
        return _always
    codes = []
    for guard in memo:
        compiled = dynamo_sources.evaluator(guard["source"])
        if compiled is None or guard["source"].startswith("dict(") or not isinstance(guard["described"].get("group"), int):
            return f"{guard['source']} is not a source this version evaluates"
        codes.append(compiled[0])
    groups = [guard["described"]["group"] for guard in memo]

    def aliased(frame_locals: Any) -> bool:
        try:
            found = [_evaluate(code, scope, frame_locals) for code in codes]  # all alive while their ids are read
            first: dict[int, int] = {}
            return [first.setdefault(id(each), index) for index, each in enumerate(found)] == groups
        except Exception:  # a name deleted, an attribute gone
            return False

    return aliased


_UNPINNED = object()  # a local source's object before a call brings the build's


def _evaluate(code: Any, scope: dict[str, Any], frame_locals: Any) -> Any:
    return eval(code, {**dynamo_sources.SOURCE_HELPERS, "__builtins__": {}, "G": scope, "L": frame_locals})


def _found(code: Any, guard: dict[str, Any], scope: dict[str, Any], frame_locals: Any) -> Any:
    """The object a source of ``guard`` is to be held to (a function's code, for CLOSURE_MATCH), or
    _UNPINNED where what is there is not described as the build's was."""
    current = _held(_evaluate(code, scope, frame_locals), guard)
    found: dict[str, Any] | None
    if guard.get("code"):
        current = getattr(current, "__code__", None)
        found = {"kind": "code", "code": dynamo_sources.code_digest(current)} if current is not None else None
    elif guard["described"].get("kind") == dynamo_sources.OPTIMIZER:
        found = {"kind": dynamo_sources.OPTIMIZER, "class": dynamo_sources.describe(current, 1)}
    else:
        found = dynamo_sources.describe(current)
    return current if found == guard["described"] else _UNPINNED


def _held(value: Any, guard: dict[str, Any]) -> Any:
    """What a guard pins of the object at its source: an optimizer's class, anything else itself."""
    return type(value) if guard["described"].get("kind") == dynamo_sources.OPTIMIZER else value


def _what(value: Any) -> str:
    return f"{getattr(value, '__module__', None) or type(value).__name__}.{getattr(value, '__qualname__', '?')}"


def _always(frame_locals: Any) -> bool:
    return True
