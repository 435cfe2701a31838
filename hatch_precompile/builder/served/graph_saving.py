"""The second pass's help for torch to save each compiled graph inside its function's Dynamo cache
entry, and what torch said where it did not (builder/served/dynamo_pass.py puts it in the build's output).

Torch puts a graph into the entry when AOTAutograd saves it. Where it does not, the entry names a
graph it does not hold ("Backend not found"): torch marks the entry bypassed, nothing of it is
shipped, and the function is traced at each user's first call.

- A training graph whose backward the workload never ran: AOTAutograd saves it once its backward
  compiles, which happens lazily, at the first ``backward()``. Each backward is compiled with its
  forward instead (torch's ``force_non_lazy_backward_lowering``), as torch itself does for graphs
  with dynamic shapes. The setting changes when a backward compiles, not what it compiles, so it is
  put back before the entries' compiler settings are read.
- A graph AOTAutograd cannot pickle (torch 2.11 on a GPU: its kernels' autotuners, once they have
  run, refuse) or will not cache: torch says why in its log, at INFO where it bypasses, and the
  build's line on the function repeats it.
"""

from __future__ import annotations

import logging

from hatch_precompile.run.torch_internals.registry import lookup

# AOTAutograd's own words when it does not save a graph (torch 2.10 to 2.15).
_NOT_SAVED = ("Bypassing autograd cache", "unable to serialize compiled graph")


class GraphSaving:
    """Installed in the second pass's process before the workloads run; ``reasons`` is what torch
    said each time it did not save a graph."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.eager_backward = False  # whether every backward is compiled with its forward

    def install(self) -> None:
        self.eager_backward = _set_eager_backward(True)
        point = lookup("graph-cache-log", "logging")
        logger = logging.getLogger(point.module)
        shown = logger.getEffectiveLevel()
        logger.setLevel(min(shown, logging.INFO))  # its bypasses are INFO records
        logger.addFilter(lambda record: self._heard(record, shown))

    def _heard(self, record: logging.LogRecord, shown: int) -> bool:
        message = record.getMessage()
        if any(words in message for words in _NOT_SAVED) and message not in self.reasons:
            self.reasons.append(message)
        return record.levelno >= shown  # what torch would have printed, and no more

    def settle(self) -> None:
        """Torch's own setting again, before the compiler settings the entries ship with are read."""
        if self.eager_backward:
            _set_eager_backward(False)

    def why(self) -> str:
        """Why an entry holds no graph, as far as this process heard, for the build's note."""
        said = "; ".join(self.reasons[:2])
        if said:
            return f"torch did not save its compiled graph ({said})"
        if not self.eager_backward:
            return ("torch saved no compiled graph for it: a training graph is saved once its backward runs "
                    "(call backward() on what it returns in the workload)")
        return "torch saved no compiled graph or no guard for it"


def _set_eager_backward(value: bool) -> bool:
    """Whether torch took the setting (its default is off)."""
    lookup("eager-backward", "setting")
    try:
        from torch._functorch import config  # noqa: TID251  (the build's child sets torch's settings)

        if not hasattr(config, "force_non_lazy_backward_lowering"):
            return False
        config.force_non_lazy_backward_lowering = value
        return True
    except Exception:
        return False
