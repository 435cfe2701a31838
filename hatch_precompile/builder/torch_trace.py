"""Torch's own compile report: its structured trace of a child's work, rendered by tlparse.

A build (the hook's ``torch-trace``, ``HATCH_PRECOMPILE_TORCH_TRACE``) and ``snoop --trace`` start
their child with ``TORCH_TRACE`` set to a directory: torch writes there one log per process that
compiles (``dedicated_log_torch_trace_*.log``). ``tlparse`` (PyPI ``tlparse``, a console script,
what PyTorch's own docs send users to) turns one log into a directory of HTML: ``index.html``
lists every compile with its stack, graph breaks and recompile reasons, each graph, its generated
code and the cache hits, and ``chromium_events.json`` opens in Perfetto. Where tlparse is not
installed the logs stay and the line says how to get it. Observation only: a trace that cannot
be rendered is a line, never a failed build or command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

TORCH_TRACE = "TORCH_TRACE"  # torch's variable: the dir its structured trace goes to
LOG_PATTERN = "dedicated_log_torch_trace_*.log"  # what torch names each process's log
HTML_DIR = "html"
TLPARSE_TIMEOUT = 600.0  # a long build's trace holds thousands of graphs; tlparse takes seconds per 100 MB


def logs(directory: Path) -> list[Path]:
    """Torch's trace logs in ``directory``, largest first (the process that compiled the most)."""
    found = [path for path in directory.glob(LOG_PATTERN) if path.is_file()]
    return sorted(found, key=lambda path: (-path.stat().st_size, path.name))


def environ(env: dict[str, str], directory: Path) -> dict[str, str]:
    """``env`` for a child whose processes write their trace into ``directory`` (made here)."""
    directory.mkdir(parents=True, exist_ok=True)
    return {**env, TORCH_TRACE: str(directory)}


def tlparse(python: str | None = None) -> str | None:
    """The tlparse command: on PATH, else beside this interpreter or ``python`` (a venv's
    scripts, where the venv is not activated), else None."""
    found = shutil.which("tlparse")
    if found:
        return found
    name = "tlparse.exe" if os.name == "nt" else "tlparse"
    for interpreter in (sys.executable, python):
        if interpreter:
            beside = Path(interpreter).parent / name  # not resolved: a venv's python is a link out of it
            if beside.is_file() and os.access(beside, os.X_OK):
                return str(beside)
    return None


@dataclass
class Report:
    """What became of a child's trace: its logs, the ``index.html`` of each one rendered, and why not."""

    directory: Path
    logs: list[Path] = field(default_factory=list)
    pages: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    tool: str | None = None

    def lines(self) -> list[str]:
        """What to say of it, one line each, for a person at a terminal or reading a CI log."""
        if not self.logs:
            return [f"torch wrote no structured trace into {self.directory} (nothing was compiled)"]
        out = [f"torch's compile report (tlparse): {page}" for page in self.pages]
        out += self.problems
        if self.tool is None:
            out.append(f"torch's structured trace is in {self.directory}; to see what compiled and why in a "
                       f"browser, install tlparse (pip install tlparse) and run: tlparse {self.logs[0]} -o "
                       f"{self.directory / HTML_DIR} --no-browser")
        return out

    def as_json(self) -> dict[str, object]:
        return {"directory": str(self.directory), "logs": [str(p) for p in self.logs],
                "html": [str(p) for p in self.pages], "tlparse": self.tool, "lines": self.lines()}


def render(directory: Path, before: set[Path] | None = None, python: str | None = None) -> Report:
    """Render each log written into ``directory`` since ``before`` (the logs that were there when
    the child started): the largest to ``html/``, any other to ``html-2/``, ``html-3/`` ..."""
    new = [path for path in logs(directory) if before is None or path not in before]
    report = Report(directory, new, tool=tlparse(python))
    if report.tool is None:
        return report
    for number, log in enumerate(new, 1):
        out = directory / (HTML_DIR if number == 1 else f"{HTML_DIR}-{number}")
        try:
            proc = subprocess.run([report.tool, str(log), "-o", str(out), "--overwrite", "--no-browser"],
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                                  timeout=TLPARSE_TIMEOUT, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            report.problems.append(f"tlparse could not render {log}: {exc}")
            continue
        page = out / "index.html"
        if proc.returncode != 0 or not page.is_file():
            said = (proc.stderr or proc.stdout).strip().splitlines()
            report.problems.append(f"tlparse could not render {log} (exit {proc.returncode})"
                                   + (f": {said[0]}" if said else ""))
            continue
        report.pages.append(page)
    return report
