"""Where a build's messages go, and the one place that words their ``precompile:`` prefix.

The hatch adapter's reporter shows them through hatch's app (hatch/plugin.py); the build's child
prints them (``STDOUT``), and child/supervisor.py relays its lines to the build; ``warm`` and
``bake`` hand theirs the command's own output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable

from hatch_precompile.run import variables

PREFIX = "precompile"

Show = Callable[[str], None]


def worded(*lines: str) -> str:
    """``lines`` as the build says them, each after ``precompile: `` (an error's message too)."""
    return "\n".join(f"{PREFIX}: {line}" for line in lines)


@dataclass(frozen=True)
class Reporter:
    """``show`` takes what the build says; ``show_warning`` what must be seen even in a quiet build."""

    show: Show
    show_warning: Show

    def info(self, text: str) -> None:
        """What the build did or found."""
        self.show(worded(text))

    def warning(self, text: str) -> None:
        """What the build passes over and goes on without (a kernel, a step or a set not shipped)."""
        self.show_warning(worded(f"warning: {text}"))

    def notice(self, *lines: str) -> None:
        """What changes or stops the wheel (built without artifacts, a check the project asked for
        found something): worded as info, seen as a warning."""
        self.show_warning(worded(*lines))

    def line(self, text: str) -> None:
        """A line as it is: one that words its own prefix (the child's), or indents under the last."""
        self.show(text)

    @contextlib.contextmanager
    def group(self, title: str, said: bool = True) -> Iterator[None]:
        """The lines said inside, folded under ``title`` in a GitHub Actions job's log (its
        ``::group::`` command, which its runner reads after leading spaces, as ``pip -v`` indents);
        elsewhere ``title`` is a line of its own where ``said``."""
        folded = variables.github_actions()
        if folded or said:
            self.show(f"::group::{worded(title)}" if folded else worded(title))
        try:
            yield
        finally:
            if folded:
                self.show("::endgroup::")


def _print(text: str) -> None:
    print(text, flush=True)  # at once: the parent relays the child's lines as they come


STDOUT = Reporter(_print, _print)
