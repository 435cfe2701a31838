"""The child process of ``hatch-precompile snoop``: the user's program, observed from its first line.

Started with a private, empty ``TORCHINDUCTOR_CACHE_DIR`` (unless ``--cache-dir``), so that a
graph served from a cache can only have come from a package's precompiled artifacts, in the
user's own temp dir, as the program runs. Installs the build's observers (child/observe.py), the
signature recorder and the ISA probes' memo (run/caches/isa_probes.py), runs the program as Python would
(a script, ``-m module``, ``-c code`` or a console script) and, however it ends, writes what it
compiled into the spec's ``out`` dir.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

from hatch_precompile.child import observe, progress, workload_loop
from hatch_precompile.protocol import CACHE_DIR_VAR, EXIT_OK, ChildResult


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    out = Path(spec["out"])
    import torch._dynamo  # noqa: F401  (the observers read Dynamo's bookkeeping)

    from hatch_precompile.run.caches import isa_probes

    # Torch probes each vector ISA in a fresh cache dir (~8 s of g++), once per cache dir the user
    # keeps: not the program's compile time. A probe that passed on this machine is not run again.
    isa_probes.install()

    observer = observe.Observer(os.environ.get(CACHE_DIR_VAR), logs=True, lines=True)
    progress.phase("running the program")
    ended: dict[str, Any] = {"exit_code": 0, "error": None}

    def program() -> None:
        try:
            _run(spec["target"])
        except SystemExit as exc:
            ended["exit_code"] = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            ended["exit_code"], ended["error"] = 1, traceback.format_exc()
            traceback.print_exc()

    record = observer.measure("program", program)
    sys.stdout.flush()
    owners = _owners()
    for graph in record["graphs"]:
        graph["distribution"] = owners(graph.get("location"))
    workload_loop.write_result(out, ChildResult("ok", workloads=[record], data={**ended, "loads": _loads(owners),
                                                                        "steps": _steps(), "served": _served()}))
    return EXIT_OK


def _run(target: dict[str, Any]) -> None:
    """Run the program as ``python ...`` would, with its own ``sys.argv``."""
    sys.argv = list(target["argv"])
    if target["kind"] == "script":
        sys.path.insert(0, os.path.dirname(os.path.abspath(target["path"])))
        runpy.run_path(os.path.abspath(target["path"]), run_name="__main__")
    elif target["kind"] == "module":
        sys.path.insert(0, os.getcwd())
        runpy.run_module(target["module"], run_name="__main__", alter_sys=True)
    elif target["kind"] == "code":
        sys.path.insert(0, "")
        exec(compile(target["code"], "<string>", "exec"), {"__name__": "__main__"})
    else:  # a console script: its entry point, called as the script would
        entry = metadata.EntryPoint(name=target["name"], value=target["value"], group="console_scripts")
        result = entry.load()()
        if result:
            raise SystemExit(result)


def _owners() -> Any:
    """file:line -> the distribution that owns the file, or "(program)" for the user's own code."""
    tops = metadata.packages_distributions()
    roots = sorted((os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)), key=len, reverse=True)

    def owner(location: str | None) -> str:
        filename = (location or "").rpartition(":")[0]
        real = os.path.realpath(filename) if filename else ""
        for root in roots:
            if real.startswith(root + os.sep):
                top = Path(real[len(root) + 1:]).parts[0].removesuffix(".py")
                if tops.get(top):
                    return tops[top][0]
        return "(program)"

    return owner


def _steps() -> list[dict[str, Any]]:
    """How many calls of each shipped step each route served (run/steps/shipped_steps.py counts them)."""
    shipped_steps = sys.modules.get("hatch_precompile.run.steps.shipped_steps")
    if shipped_steps is None:
        return []
    return [{"package": package, "name": name, "route": route, "calls": calls}
            for (package, name, route), calls in sorted(shipped_steps.this_process.served.items())]


def _served() -> dict[str, str]:
    """What became of each compiled function a package shipped as a Dynamo cache entry (run/served/served_compile.py)."""
    served_compile = sys.modules.get("hatch_precompile.run.served.served_compile")
    return served_compile.served() if served_compile is not None else {}


def _loads(owners: Any) -> list[dict[str, Any]]:
    """What hatch_precompile.load() did for each package of this process."""
    load_caches = sys.modules.get("hatch_precompile.run.load_caches")
    if load_caches is None:
        return []
    out = []
    for result in load_caches.results():
        module = sys.modules.get(result.package)
        location = f"{getattr(module, '__file__', '') or ''}:1"
        out.append({
            "package": result.package, "loaded": result.loaded, "reason": result.reason,
            "artifact_set": result.artifact_set, "distribution": owners(location),
        })
    return out
