"""Why a graph compiled although a shipped one is like it: torch's cache key, field by field.

The build ships what each of its keys was made of (child/key_details.py, packed into the manifest's
``keys``); verify's and snoop's processes record the same for what they compile. For a graph that
compiled here, the shipped entry of the same function that differs least is compared with it:
every differing field with both values and what sets it, and, when the traced code differs, the
functions whose source changed since the build. Pure data: no torch, no files.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, Iterable

from hatch_precompile.protocol.workloads import of as workloads_of
from hatch_precompile.protocol.workloads import unpack_keys

# What sets each field of torch's key, for a user who has to change it back.
MEANINGS = {
    "gm": "the traced graph's code",
    "deterministic_algorithms": "torch.use_deterministic_algorithms()",
    "deterministic_algorithms_settings": "torch.use_deterministic_algorithms() (enabled, warn_only, "
                                         "fill_uninitialized_memory)",
    "cpp_runtime_thread_count": "the thread count (torch.set_num_threads, OMP_NUM_THREADS)",
    "default_dtype": "torch.set_default_dtype()",
    "cuda_matmul_settings": "the float32 matmul precision (torch.set_float32_matmul_precision) and "
                            "reduced-precision matmul flags",
    "grad_enabled": "grad mode (torch.no_grad)",
    "disable_amp": "autocast (torch.autocast)",
    "torch_version": "torch itself (its version or build)",
    "cache_key_tag": "torch.compiler.config.cache_key_tag",
}
_PREFIXES = {
    "inductor_config": "torch._inductor.config.{} (or its TORCHINDUCTOR_ variable)",
    "autograd_config": "torch._functorch.config.{}",
    "example_inputs": "input {}: dtype, shape, strides, device",
    "fx_kwargs": "how Inductor compiles the graph ({})",
    "system_info": "the machine ({}: device, CUDA, compiler)",
}
# Shown first: what a user sets on purpose, then where the code or the call differ.
_FIRST = ("deterministic_algorithms_settings", "deterministic_algorithms", "cpp_runtime_thread_count",
          "default_dtype", "cuda_matmul_settings", "grad_enabled", "disable_amp", "torch_version")


def meaning(field: str) -> str:
    if field in MEANINGS:
        return MEANINGS[field]
    head, _, rest = field.partition("[")
    if head in _PREFIXES and rest.endswith("]"):
        return _PREFIXES[head].format(rest[:-1])
    return f"torch's key field {field}"


def explain(here: Iterable[dict[str, Any]], shipped: Iterable[dict[str, Any]], compile_id: str | None,
            shipped_ids: Iterable[str | None], top: str | None, *, files: Iterable[str] | None = None,
            graphs: Iterable[Any] = (), failures: Iterable[dict[str, Any]] = (),
            unloadable: Iterable[dict[str, Any]] = ()) -> dict[str, Any] | None:
    """Why the graph compiled as ``compile_id`` here missed the shipped graphs ``shipped_ids``.

    None when either side recorded nothing to compare. Else ``{"cache", "key_same", "fields":
    [{field, shipped, here, means}], "sources": [{function, file, change, shipped_line, here_line}],
    "compared_with": shipped compile id, "unused": why torch did not use an entry under the same
    key, or None}``. ``files``: the shipped set's logical paths; ``graphs``: its workloads' graphs;
    ``failures`` and ``unloadable``: what this process's observer recorded (child/unused_entries.py)."""
    mine = [e for e in here if e.get("compile_id") == compile_id]
    ids = set(shipped_ids)
    theirs = [e for e in shipped if e.get("compile_id") in ids]
    for cache in ("aot", "fx"):  # AOTAutograd's key holds the FX graph key's fields and more
        mine_c = [e for e in mine if e.get("cache") == cache and e.get("role") in ("graph", "forward", "inference")]
        theirs_c = [e for e in theirs if e.get("cache") == cache and e.get("role") in ("graph", "forward", "inference")]
        if mine_c and theirs_c:
            break
    else:
        return None
    me = mine_c[0]
    best = min(theirs_c, key=lambda e: len(differing(e["fields"], me["fields"])))
    fields = differing(best["fields"], me["fields"])
    key_same = bool(me.get("key")) and me.get("key") == best.get("key")
    return {
        "cache": cache,
        "key_same": key_same,
        "compared_with": best.get("compile_id"),
        "fields": [{"field": f, "shipped": best["fields"].get(f), "here": me["fields"].get(f), "means": meaning(f)}
                   for f in fields],
        "sources": changed_sources(best.get("sources") or {}, me.get("sources") or {}, top),
        "unused": unused(cache, best, compile_id, files, graphs, failures, unloadable) if key_same else None,
    }


def unused(cache: str, shipped: dict[str, Any], compile_id: str | None, files: Iterable[str] | None,
           graphs: Iterable[Any], failures: Iterable[dict[str, Any]],
           unloadable: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Why torch did not use the shipped entry whose key this process computed, most certain first:
    ``{"kind": "not_shipped", "nothing_compiled"}`` (the build saved no entry under the key),
    ``{"kind": "guard", "guards": [{expr, here, shipped}]}``, ``{"kind": "load", file, fx_key, part,
    error}``, ``{"kind": "absent"}`` (shipped, but not in this process's cache dir) or
    ``{"kind": "unknown"}``."""
    key = shipped.get("key") or ""
    if files is not None and key:
        prefix = f"inductor/aotautograd/{key}/" if cache == "aot" else f"inductor/fxgraph/{key[1:3]}/{key}/"
        if not any(name.startswith(prefix) for name in files):
            built = [g for g in graphs if getattr(g, "compile_id", None) == shipped.get("compile_id")
                     and getattr(g, "kind", "forward") == "forward"]
            return {"kind": "not_shipped",
                    "nothing_compiled": bool(built) and all(not (g.fx_hits or g.fx_misses) for g in built)}
    failed = [g for g in failures if g.get("compile_id") == compile_id]
    if failed:
        saved = {g.get("expr"): g.get("values") for g in shipped.get("guards") or [] if isinstance(g, dict)}
        return {"kind": "guard", "guards": [{"expr": g.get("expr"), "here": g.get("values"),
                                             "shipped": saved.get(g.get("expr"))} for g in failed]}
    for problem in unloadable:
        if problem.get("compile_id") == compile_id and (problem.get("key") in (None, key) or cache != "aot"):
            if problem.get("absent"):
                return {"kind": "absent"}
            return {"kind": "load", **{k: problem.get(k) for k in ("file", "fx_key", "part", "error")}}
    return {"kind": "unknown"}


def differing(shipped: dict[str, str], here: dict[str, str]) -> list[str]:
    names = [k for k in {**shipped, **here} if shipped.get(k) != here.get(k)]
    return sorted(names, key=lambda f: (_FIRST.index(f) if f in _FIRST else len(_FIRST), f != "gm", f))


def changed_sources(shipped: dict[str, Any], here: dict[str, Any], top: str | None) -> list[dict[str, Any]]:
    """The traced functions whose source differs, matched by their path inside the package."""
    def by_place(sources: dict[str, Any]) -> dict[str, tuple[str, Any]]:
        out = {}
        for name, info in sources.items():
            filename, _, function = name.rpartition(":")
            out[f"{package_path(filename, top)}:{function}"] = (filename, info)
        return out

    theirs, mine = by_place(shipped), by_place(here)
    changes = []
    for place in sorted({**theirs, **mine}):
        there, now = theirs.get(place), mine.get(place)
        if there and now and there[1].get("sha256") == now[1].get("sha256"):
            continue
        path, _, function = place.rpartition(":")
        change = "changed" if there and now else ("traced only here" if now else "traced only at build")
        changes.append({"function": function, "file": path, "change": change,
                        "shipped_line": there[1].get("line") if there else None,
                        "here_line": now[1].get("line") if now else None})
    return changes


def same_function_graphs(manifest: Any, function: str | None, location: str | None, top: str) -> list[Any]:
    """The forward graphs ``manifest``'s workloads compiled of the same function, at the same place
    in the package (the build's source tree and an install compare)."""
    return [g for w in workloads_of(manifest) for g in (w.graphs or [])
            if g.kind == "forward" and g.function == function and place(g.location, top) == place(location, top)]


def explain_graph(graph: dict[str, Any], keys: list[dict[str, Any]], manifests: Iterable[Any],
                  top: str, observed: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Why ``graph`` (verify's or snoop's record) missed, against the first artifact set that
    holds graphs of its function. ``observed``: the workload's record (its ``guard_failures`` and
    ``unloadable``)."""
    observed = observed or {}
    for manifest in manifests:
        found = same_function_graphs(manifest, graph.get("function"), graph.get("location"), top)
        if found:
            return explain(keys, unpack_keys(manifest.keys), graph.get("compile_id"),
                           [g.compile_id for g in found], top, files=getattr(manifest, "files", None),
                           graphs=found, failures=observed.get("guard_failures") or (),
                           unloadable=observed.get("unloadable") or ())
    return None


def place(location: str | None, top: str) -> str | None:
    """``pkg/mod.py:30`` from a build's source tree or an install: the same function in both."""
    if not location:
        return None
    filename, _, line = location.rpartition(":")
    if top not in PurePath(filename).parts:
        return None
    return f"{package_path(filename, top)}:{line}"


def package_path(filename: str, top: str | None) -> str:
    """``sample_pkg/model.py`` for the same file in a build's source tree and in an install."""
    parts = PurePath(filename).parts
    if top and top in parts:
        start = len(parts) - 1 - parts[::-1].index(top)
        return "/".join(parts[start:])
    return filename


def summary(why: dict[str, Any], limit: int = 6) -> list[str]:
    """The explanation as lines, most telling first."""
    if why["key_same"]:
        return unused_lines(why.get("unused") or {"kind": "unknown"})
    lines = []
    for change in why["sources"]:
        if change["change"] == "changed":
            lines.append(f"the source of {change['function']} ({change['file']}:{change['here_line']}) changed "
                         "since the build")
        else:
            lines.append(f"{change['function']} ({change['file']}) was {change['change']}")
    fields = why["fields"]
    for f in fields[:limit]:
        lines.append(f"{f['field']}: shipped {f['shipped']}, here {f['here']} -- {f['means']}")
    if len(fields) > limit:
        lines.append(f"... and {len(fields) - limit} more field(s) (--json lists them all)")
    if not lines:
        lines.append("no field of the key differs: the key was computed for another graph of this function")
    return lines


def unused_lines(unused: dict[str, Any]) -> list[str]:
    """Why torch did not use the shipped entry under this process's key, as lines."""
    kind = unused.get("kind")
    if kind == "not_shipped":
        if unused.get("nothing_compiled"):
            return ["torch's key is the shipped entry's, but the build saved no entry under it: the graph has no "
                    "operation for Inductor to compile (its outputs are its inputs or views of them, as after a "
                    "graph break at loss.backward()), and torch caches no such graph; rebuild with this "
                    "hatch-precompile, whose builds save one"]
        return ["torch's key is the shipped entry's, but the build saved no entry under it: torch saves a "
                "training graph's entry when its backward compiles, and the workload never ran this graph's "
                "backward (call backward() on what it returns in the workload), or torch bypassed its cache "
                "at build (`hatch-precompile report` lists bypasses)"]
    if kind == "guard":
        lines = []
        for guard in unused.get("guards") or []:
            here, shipped = guard.get("here") or {}, guard.get("shipped")
            lines.append(f"torch's key is the shipped entry's, but its guard failed here: {guard.get('expr')} -- "
                         f"here {_values(here)}, at build "
                         + (_values(shipped) if shipped is not None else "(values not recorded)"))
        return lines
    if kind == "load":
        what = (f"the FX graph entry {unused['fx_key']} its {unused.get('part') or 'forward'} graph names"
                if unused.get("fx_key") else "its file")
        where = f" ({unused['file']})" if unused.get("file") else ""
        return [f"torch's key is the shipped entry's, but {what}{where} could not be loaded here: "
                f"{unused.get('error')}"]
    if kind == "absent":
        return ["torch's key is the shipped entry's, but there was no entry under it in this process's cache dir: "
                "load() did not install it (its status says why)"]
    return ["torch's key is the shipped entry's and the entry loads here, yet torch did not use it; no guard "
            "failure was recorded (TORCH_LOGS=+torch._functorch._aot_autograd.autograd_cache shows torch's own "
            "reasons)"]


def _values(values: dict[str, Any]) -> str:
    return ", ".join(f"{name} = {value}" for name, value in values.items()) or "no values"
