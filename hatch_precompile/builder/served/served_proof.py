"""The second pass's entries proven before they ship: installed and run in a fresh process as a user's.

After the second pass (builder/served/dynamo_pass.py), the run is laid out as a set into a private store of
its own (the layout ``warm`` stores), and verify's child (child/verify_child.py) imports the package
from the project, as a user's process does: ``load()`` finds the set there, installs it, serves the
package's ``torch.compile`` calls, and the workloads run again. What ``served()`` then says of each
compiled function is the build's verdict: a function whose entry torch would not install here (an
``IndexError`` while it rebuilds the guards, say), or that the replay traced for a check of its own,
is not shipped, and the build names it with the reason; the others are ``served N of M``. The
manifest's ``served`` field keeps the same (``report`` shows it).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from hatch_precompile.builder.reporter import PREFIX, Reporter
from hatch_precompile.builder.sets import artifact_layout
from hatch_precompile.child import supervisor
from hatch_precompile.errors import ChildError
from hatch_precompile.protocol import (
    APP,
    BUILDING_VAR,
    CACHE_DIR_VAR,
    DYNAMO_DIR,
    MANIFEST_FILE,
    SERVED_FILE,
    SETS_DIR,
    STEPS_DIR,
    TRY_AT_IMPORT_VAR,
    Manifest,
    canonical_name,
    env_id,
    served_compiles,
    set_name,
)
from hatch_precompile.run.served import entry_install

_SECOND_PASS_ONLY = ("TORCH_CACHING_PRECOMPILE",)


def prove(python: str, run_dir: Path, spec: dict[str, Any], env: dict[str, str], limits: tuple[float, float | None],
          reporter: Reporter, result: dict[str, Any], cache_dir: Path, out_dir: Path,
          users_torch: bool, unshipped: dict[str, str], verdict: Reporter | None = None) -> dict[str, Any] | None:
    """Run the package served from ``out_dir``'s entries over ``cache_dir``'s graphs; take out of
    ``out_dir`` what would not be served, and say so (to ``verdict``, where given; the child's lines
    go to ``reporter``). The manifest's ``served`` record (with ``unshipped``: the functions the
    second pass did not ship, and why), or None where the second pass shipped nothing and said why."""
    verdict = verdict or reporter
    index_file = out_dir / SERVED_FILE
    if not index_file.is_file():
        return {"functions": len(unshipped), "served": 0, "not_served": unshipped, "proof": None} if unshipped else None
    index = served_compiles.parse(index_file.read_text())
    started = time.perf_counter()
    work = run_dir / "served-proof"
    work.mkdir(mode=0o700)  # as run_dir: under umask 002 too, the cache dir's parents are private
    store = work / "user-cache"
    staged = work / "staged"
    quiet = Reporter(_silent, _silent)
    manifest = artifact_layout.lay_out(staged, spec["package"], result, cache_dir=cache_dir, out_dir=out_dir,
                                       started=started, reporter=quiet)
    if manifest is None:
        return None
    # A package that ships steps promises its step route a start with no compiler imported: its
    # entries install at torch.compile, never at import (where nothing may compile them).
    at_import = not manifest.steps
    manifest = _without_steps(staged, manifest)
    entry = store / APP / canonical_name(spec["package"]) / env_id(manifest.env)
    entry.parent.mkdir(parents=True)
    shutil.copytree(staged, entry)
    _private(store)
    proof_env = {k: v for k, v in env.items() if k not in (BUILDING_VAR, *_SECOND_PASS_ONLY)}
    proof_env.update({"XDG_CACHE_HOME": str(store), CACHE_DIR_VAR: str(work / "inductor-cache"),
                      TRY_AT_IMPORT_VAR: "1" if at_import else "0"})
    timeout, heartbeat = limits
    job = supervisor.Job("hatch_precompile.child.verify_child", spec,
                         f"{PREFIX} (served, proven)", reporter.line,
                         relay=lambda line: reporter.line(f"  | {line}"), timeout=timeout,
                         heartbeat=heartbeat if heartbeat is not None else 30.0, own_temp=not users_torch)
    raised: dict[str, str] = {}  # each function a failed replay raised in, and what it raised
    for attempt in range(_TRIES):
        why = ""
        try:
            proven = supervisor.run(job, work / f"child-{attempt}", python, proof_env)
        except ChildError as exc:
            proven, why = None, exc.detail
        if proven is not None and proven.status == "ok":
            break
        failure = proven.failure if proven is not None else None
        if proven is not None:
            why = proven.detail or (failure.traceback.strip().splitlines()[-1] if failure else proven.status)
        implicated = _raised_in(index, failure.traceback if failure else "")
        if not implicated or attempt == _TRIES - 1:
            _drop(out_dir, index, set(index.functions))
            _write_not_served(out_dir, {**unshipped, **raised})
            verdict.warning(f"no compiled function is served untraced: served from the set in a fresh process, the "
                             f"workloads did not run ({why})")
            failed = {f.name: f"not proven: {why}" for f in index.functions.values()}
            return {"functions": len(index.functions) + len(raised) + len(unshipped), "served": 0,
                    "not_served": {**unshipped, **raised, **failed}, "proof": f"failed: {why}"}
        # A served call raised: that function is not shipped, and the replay runs again without it.
        raised.update({index.functions[key].name: f"served in a fresh process, a call of it raised ({why})"
                       for key in implicated})
        _drop(out_dir, index, implicated)
        index = served_compiles.parse(index_file.read_text()) if index_file.is_file() else index
        manifest = artifact_layout.lay_out(_fresh(staged), spec["package"], result, cache_dir=cache_dir,
                                           out_dir=out_dir, started=started, reporter=quiet)
        if manifest is None or not index_file.is_file():
            return {"functions": len(raised) + len(unshipped), "served": 0,
                    "not_served": {**unshipped, **raised}, "proof": f"failed: {why}"}
        manifest = _without_steps(staged, manifest)
        shutil.rmtree(entry)
        shutil.copytree(staged, entry)
        _private(store)
    assert proven is not None
    outcomes = proven.data.get("served") or {}
    load = proven.data.get("load") or {}
    not_loaded = None if load.get("loaded", True) else f"load() did not install the set: {load.get('reason')}"
    index = _install_points(out_dir, index, set(proven.data.get("first_call") or ()),
                            set(proven.data.get("at_import") or ()))
    not_served = dict(raised)
    for function in index.functions.values():
        name = function.name
        outcome = outcomes.get(name)
        if outcome is None:
            not_served[name] = not_loaded or "the workloads, served, did not compile it"
        elif not outcome.startswith("served"):
            not_served[name] = outcome.removeprefix("traced: ")
        elif entry_install.calls_traced(outcome):  # installed, and still traced at a call the workloads make
            not_served[name] = "served in a fresh process, the workloads' calls of it traced: " + \
                outcome.split(" call(s) traced here: ", 1)[1]
    _drop(out_dir, index, {key for key, f in index.functions.items() if f.name in not_served})
    _write_not_served(out_dir, {**unshipped, **not_served})
    for name, why in sorted(not_served.items()):
        verdict.warning(f"not served untraced: {name}: {why}")
    record = {"functions": len(index.functions) + len(raised) + len(unshipped),
              "served": len(index.functions) - len(not_served) + len(raised),
              "not_served": {**unshipped, **not_served}, "proof": "ok"}
    by_dependencies = sorted(f.name for f in index.functions.values() if f.made_by is not None and f.name not in not_served)
    if by_dependencies:  # a package whose dependencies compile nothing for it keeps the record it had
        record["by_dependencies"] = by_dependencies
    verdict.info(f"{record_line(record, named=False)}, proven in a fresh process "
                  f"({time.perf_counter() - started:.1f} s)")
    return record


_TRIES = 3  # replays of the proof: each failed one takes out the functions whose served calls raised


def _raised_in(index: served_compiles.Index, traceback: str) -> set[str]:
    """The keys of the shipped functions a failed replay's traceback runs through (a frame in the
    function's own file and of its name: Dynamo's code for it keeps both)."""
    frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', traceback)
    found = set()
    for key, function in index.functions.items():
        path = function.module.replace(".", "/") + ".py"
        name = function.qualname.rsplit(".", 1)[-1]
        if any(file.endswith(path) and code == name for file, code in frames):
            found.add(key)
    return found


def _fresh(staged: Path) -> Path:
    shutil.rmtree(staged)
    return staged


def _write_not_served(out_dir: Path, not_served: dict[str, str]) -> None:
    """Each function the build compiled and does not ship, and why, in the index: ``served()`` says it
    where the package compiles it."""
    index_file = out_dir / SERVED_FILE
    if not_served and index_file.is_file():
        index = served_compiles.parse(index_file.read_text())
        index_file.write_text(served_compiles.dumps(dataclasses.replace(index, not_served=dict(not_served))))


def _without_steps(staged: Path, manifest: Manifest) -> Manifest:
    """The staged set with no step: a shipped step runs in place of the compiled functions it
    stands for, and the replay is there to run those, as a user's process does where a step falls
    back (another torch, other arguments)."""
    if not manifest.steps:
        return manifest
    files = {path: entry for path, entry in manifest.files.items() if not path.startswith(f"{STEPS_DIR}/")}
    bare = dataclasses.replace(manifest, steps={}, files=files)
    (staged / SETS_DIR / set_name(manifest.env) / MANIFEST_FILE).write_text(bare.dumps())
    return bare


def _install_points(out_dir: Path, index: served_compiles.Index, first_call: set[str],
                    at_import: set[str]) -> served_compiles.Index:
    """The index with each function marked where the proof installed its entry: at its first call (a
    user's process does not try it at ``torch.compile``, where torch cannot rebuild its guards yet),
    or at its module's import (a user's process installs it there, before the package compiles it:
    the proof's child tried each entry so, and these took)."""

    def marked_at(name: str) -> str | None:
        return "first-call" if name in first_call else "import" if name in at_import else None

    marked = {key: dataclasses.replace(f, install_at=marked_at(f.name) or f.install_at)
              for key, f in index.functions.items()}
    if marked == index.functions:
        return index
    index = dataclasses.replace(index, functions=marked)
    (out_dir / SERVED_FILE).write_text(served_compiles.dumps(index))
    return index


def _silent(line: str) -> None:
    """The staging layout's lines: the real one says them."""


def _drop(out_dir: Path, index: served_compiles.Index, keys: set[str]) -> None:
    """Take the functions ``keys`` out of the index and their files out of ``out_dir``."""
    if not keys:
        return
    for key in keys:
        function = index.functions[key]
        for logical in {function.entry, function.guards, *function.parts.values()}:
            (out_dir / logical).unlink(missing_ok=True)
    kept = {k: f for k, f in index.functions.items() if k not in keys}
    if not kept:
        shutil.rmtree(out_dir / DYNAMO_DIR, ignore_errors=True)
        return
    used = {c["settings"] for f in kept.values() for c in f.guarded.values() if isinstance(c, dict)}
    settings = {digest: values for digest, values in index.settings.items() if digest in used}
    (out_dir / SERVED_FILE).write_text(served_compiles.dumps(served_compiles.Index(index.optimize, settings, kept,
                                                                                   index.not_served)))


def _private(root: Path) -> None:
    """The store as ``load()`` trusts one: the user's own dirs (0700) and files (0600)."""
    for directory, dirs, files in os.walk(root):
        os.chmod(directory, 0o700)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o600)


def record_line(record: dict[str, Any], named: bool = True) -> str:
    """The ``served`` record in one line, as ``report`` says it (``named``: with each not served, and why)."""
    said = f"served {record['served']} of {record['functions']} compiled function(s) untraced"
    if record.get("by_dependencies"):  # compiled by a library the package calls, on its behalf
        said += f" ({len(record['by_dependencies'])} compiled by its dependencies: {'; '.join(record['by_dependencies'])})"
    if named and record.get("not_served"):
        said += "; not: " + "; ".join(f"{name} ({why})" for name, why in sorted(record["not_served"].items()))
    return said
