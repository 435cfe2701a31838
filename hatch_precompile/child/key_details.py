"""What torch's cache keys were made of, compile by compile: the evidence for why a graph missed.

Torch's FX-graph and AOTAutograd keys are hashes of a details object (``FxGraphHashDetails`` and
its subclass ``AOTAutogradCacheDetails``): the graph's code, its inputs' shapes, strides and
dtypes, torch's and the system's versions, the thread count, deterministic mode, default dtype,
matmul precision and every Inductor and functorch setting. In an observed process (the build's
child, verify's, snoop's) each details object is kept as torch made it and turned into readable
fields after the workload; the build ships them in the manifest, and tools/why.py compares them
with a process whose graph missed. Each traced graph also names the functions whose code it
inlined, with a digest of each one's source, so that a code change names the function.

Observation only: torch computes its keys as always, and a recorder that breaks records nothing.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import logging
import re
from typing import Any

from hatch_precompile.run.torch_internals import patching

log = logging.getLogger("hatch_precompile.observe")

MAX_VALUE = 160  # longer values are cut, with a digest of the whole so that they still compare
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a function's repr differs per process, not its identity
_COMMENT = re.compile(r" *#.*")  # torch's key drops the graph code's comments too
# Parts of a config dataclass torch leaves out of its key (a debug counter); so are callables and
# tables of them (compilers, decompositions), which torch's key reduces to names or omits.
_NOT_KEYED = ("aot_id",)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>[\w<>.]+)')


class KeyRecorder:
    """Collects the details of every cache key computed in this process, in order."""

    def __init__(self) -> None:
        self._made: list[dict[str, Any]] = []  # {"details": obj, "compile_id", "key"}
        self._taken = 0
        patching.wrap("key-details", after=self._details)
        patching.wrap("fx-key", after=self._key("fx"))
        patching.wrap("aot-key", after=self._key("aot"))

    def _details(self, arguments: dict[str, Any], _: Any) -> None:
        details = arguments["self"]
        cache = "aot" if type(details).__name__.startswith("AOT") else "fx"
        if cache == "aot" and self._made and self._made[-1]["details"] is details:
            return  # AOTAutogradCacheDetails runs FxGraphHashDetails.__init__ inside its own
        self._made.append({"details": details, "cache": cache, "compile_id": current_compile_id(), "key": None})

    def _key(self, cache: str) -> Any:
        def note(arguments: dict[str, Any], result: Any) -> None:
            if not (isinstance(result, tuple) and result and isinstance(result[0], str)):
                return  # another shape than torch's (key, debug lines): the key stays unknown
            for made in reversed(self._made):
                if made["cache"] == cache:
                    if made["key"] is None:
                        made["key"] = result[0]
                    return
        return note

    def take(self) -> list[dict[str, Any]]:
        """The keys made since the last call, as plain data (after the workload: torch and our own
        hooks have finished changing the details objects by then)."""
        made, self._taken = self._made[self._taken:], len(self._made)
        entries = []
        for item in made:
            try:
                entries.append(entry(item["details"], item["cache"], item["compile_id"], item["key"]))
            except Exception:  # torch's details are not what we expect: no explanation for this one
                log.debug("observer: a key's details not read", exc_info=True)
        for item in made:
            item["details"] = None  # the graphs and inputs they hold may be large
        return entries


def entry(details: Any, cache: str, compile_id: str | None, key: str | None) -> dict[str, Any]:
    fields = fields_of(details)
    gm = getattr(details, "gm", None)
    role = "graph"
    if cache == "fx":
        role = ("backward" if fields.get("fx_kwargs[is_backward]") == "True"
                else "inference" if fields.get("fx_kwargs[is_inference]") == "True" else "forward")
    return {"cache": cache, "role": role, "compile_id": compile_id, "key": key, "fields": fields,
            "sources": sources(gm) if gm is not None else {}}


def fields_of(details: Any) -> dict[str, str]:
    """Every part of a details object, by torch's own names (``inductor_config[max_autotune]``),
    each as a short stable text: dicts and lists one field per item, as torch's debug lines do."""
    out: dict[str, str] = {}
    for name, value in vars(details).items():
        if _is_graph_module(value):
            out[name] = graph_code(value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for field in dataclasses.fields(value):  # AOTConfig: the parts torch keys on
                v = getattr(value, field.name, None)
                if field.name not in _NOT_KEYED and not callable(v) and not isinstance(v, dict):
                    out[f"{name}.{field.name}"] = value_text(v)
        elif isinstance(value, dict):
            for k, v in value.items():
                out[f"{name}[{k}]"] = value_text(v)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                out[f"{name}[{i}]"] = value_text(v)
        else:
            out[name] = value_text(value)
    return out


def value_text(value: Any) -> str:
    """One part of a key as a short stable text: a tensor by its metadata, bytes and long values by their
    digest, no memory addresses."""
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes sha256:{hashlib.sha256(value).hexdigest()[:16]}>"
    if _is_tensor(value):  # what torch's key holds of a tensor: its metadata, never its values
        return tensor_text(value)
    text = _ADDRESS.sub("", repr(value))
    if len(text) > MAX_VALUE:
        text = f"{text[:MAX_VALUE]}... <sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]}>"
    return text


def _is_tensor(value: Any) -> bool:
    return all(hasattr(value, name) for name in ("dtype", "shape", "stride", "device", "requires_grad"))


def tensor_text(t: Any) -> str:
    """``float32[64, 1, 28, 28] stride (784, 784, 28, 1) cpu requires_grad``."""
    dtype = str(t.dtype).removeprefix("torch.")
    shape = ", ".join(str(d) for d in t.shape)
    stride = tuple(str(s) for s in t.stride()) if callable(t.stride) else ()
    extra = " requires_grad" if t.requires_grad else ""
    return f"{dtype}[{shape}] stride ({', '.join(stride)}{',' if len(stride) == 1 else ''}) {t.device}{extra}"


def graph_code(gm: Any) -> str:
    """The graph's code as torch's key sees it, as a digest and a size."""
    code = _COMMENT.sub("", str(getattr(gm, "code", "")))
    lines = [line for line in code.splitlines() if line.strip()]
    return f"<graph code: {len(lines)} lines, sha256:{hashlib.sha256(code.encode()).hexdigest()[:16]}>"


def _is_graph_module(value: Any) -> bool:
    return type(value).__name__.endswith("GraphModule") and hasattr(value, "graph")


def sources(gm: Any) -> dict[str, dict[str, Any]]:
    """Each function whose code the graph traced (from its nodes' stack traces), torch's own aside:
    ``file:function`` -> ``{"line": the def's line, "sha256": of its source}``."""
    found: dict[str, dict[str, Any]] = {}
    for node in getattr(gm.graph, "nodes", ()):
        trace = (getattr(node, "meta", None) or {}).get("stack_trace")
        if not isinstance(trace, str):
            continue
        for frame in _FRAME.finditer(trace):
            filename, function, line = frame["file"], frame["function"], int(frame["line"])
            if _is_torchs(filename) or f"{filename}:{function}" in found:
                continue
            digest = function_digest(filename, function, line)
            if digest is not None:
                found[f"{filename}:{function}"] = {"line": digest[0], "sha256": digest[1]}
    return found


def _is_torchs(filename: str) -> bool:
    return "/torch/" in filename.replace("\\", "/") or filename.startswith("<")


def function_digest(filename: str, function: str, line: int) -> tuple[int, str] | None:
    """(line of the def, sha256 of its source) of ``function`` around ``line`` in ``filename``."""
    tree = _parsed(filename)
    if tree is None:
        return None
    source, module = tree
    best = None
    for node in ast.walk(module):
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function.rsplit(".", 1)[-1]
                and node.lineno <= line <= (node.end_lineno or node.lineno)):
            if best is None or node.lineno > best.lineno:  # the innermost
                best = node
    if best is None:
        return None
    text = ast.get_source_segment(source, best) or ""
    return best.lineno, hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def _parsed(filename: str) -> tuple[str, ast.Module] | None:
    try:
        with open(filename, encoding="utf-8") as f:
            source = f.read()
        return source, ast.parse(source)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None


def current_compile_id() -> str | None:
    """The compile id of the frame Dynamo compiles now, as text; None outside a compile."""
    try:
        from torch._guards import CompileContext

        compile_id = CompileContext.current_compile_id()
        return None if compile_id is None else str(compile_id)
    except Exception:
        return None
