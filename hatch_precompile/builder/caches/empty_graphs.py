"""Graphs with nothing to compute get a cache entry too, so that the user's process is served them.

Inductor returns a graph without a single call (its outputs only its inputs or views of them, as
AOTAutograd hands it the graph of ``return loss.detach()`` after a graph break at
``loss.backward()``) as the graph's own Python code, without compiling it or keying it
(``_compile_fx_inner``: ``count_calls(gm.graph) == 0``, torch 2.7 to 2.15). AOTAutograd then saves
no entry for the graph it belongs to (``_should_save_cache``: every compiled part needs an FX graph
key), so no process is ever served it from a cache, the build included: each fresh process traces
it through AOTAutograd again (0.3 to 0.6 s on a 2-core CPU), although its key is the build's.

In the build's child, Inductor is told that such a graph has a call: it compiles it as it compiles
every other graph (as torch itself does with its bundled AOTAutograd cache), keys it, and
AOTAutograd saves the entry. Nothing else changes: both cache keys are computed before, from the
graph as it is, so the user's process computes the same keys and loads the shipped entry without
any hook. Through the touchpoints ``inductor-compile`` and ``count-calls``; where either is not
what we expect, the graph is left to torch (not cached, as before).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from hatch_precompile.run.torch_internals import patching

log = logging.getLogger("hatch_precompile.builder")


class EmptyGraphs:
    """Marks each graph Inductor is asked to compile that has no call; answers 1 call for it."""

    def __init__(self) -> None:
        self.marked: weakref.WeakSet[Any] = weakref.WeakSet()
        self.compiled = 0  # graphs compiled that Inductor would have returned as they were

    def install(self) -> None:
        patching.wrap("inductor-compile", before=self._before_compile)
        patching.wrap("count-calls", instead=self._count)

    def _before_compile(self, arguments: dict[str, Any]) -> None:
        graph = getattr(arguments.get("gm"), "graph", None)
        if graph is not None and not any("call" in node.op for node in graph.nodes):
            self.marked.add(graph)

    def _count(self, arguments: dict[str, Any]) -> Any:
        graph = arguments.get("g")
        if graph is not None and graph in self.marked:
            self.marked.discard(graph)  # asked once, by Inductor, before it compiles the graph
            self.compiled += 1
            return 1
        return patching.PASS
