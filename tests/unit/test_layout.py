"""The rooms stay findable: no module grows past one screenful of jobs, no folder of the build or run
side past a dozen modules, every module path the docs or the source names exists,
``docs/architecture.md``'s map names every module, its Routes table names folders that exist on both
sides, and its "Where to look" answers lead to the function that does the job."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hatch_precompile"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 400
# A module path as the docs and docstrings write it: relative to hatch_precompile/. ``build/`` is
# read too, though no such folder is left (the build side is ``builder/``): a path written the old
# way is then named as missing.
MODULE_PATH = re.compile(r"(?:(?<=hatch_precompile/)|(?<![\w/.]))((?:hatch|tools|builder|build|child|run|protocol)(?:/[a-z_]+)*/[a-z_]+\.py)\b")


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def test_no_module_passes_the_line_limit():
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, f"split these by job (at most {MAX_LINES} lines each):\n" + "\n".join(long)


# A folder of a dozen modules is a room; one of forty is a corridor. The build and run sides, and each
# folder under them, hold at most this many modules directly (``__init__.py`` not counted).
MAX_MODULES_PER_FOLDER = 12
SIDES = ("builder", "run")


def folders(side: str) -> list[Path]:
    return [PACKAGE / side, *sorted(p for p in (PACKAGE / side).rglob("*") if p.is_dir() and p.name != "__pycache__")]


def test_no_folder_of_the_build_or_run_side_passes_a_dozen_modules():
    crowded = [f"{folder.relative_to(ROOT)}/: {n} modules" for side in SIDES for folder in folders(side)
               if (n := len([p for p in folder.glob("*.py") if p.name != "__init__.py"])) > MAX_MODULES_PER_FOLDER]
    assert not crowded, f"group these by route or job (at most {MAX_MODULES_PER_FOLDER} modules a folder):\n" + "\n".join(crowded)


def test_every_folder_of_the_build_and_run_sides_is_a_package_that_says_its_job():
    bare = [str(folder.relative_to(ROOT)) for side in SIDES for folder in folders(side)
            if not (folder / "__init__.py").is_file() or not ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))]
    assert not bare, "folders without an __init__.py whose docstring says their job: " + ", ".join(bare)


def test_no_folder_is_named_as_build_output():
    """``build/`` is skipped by tools that map a tree and by many global ignore files (GitHub's Python
    template has an unanchored ``build/``): the build side would be invisible to them."""
    named = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*") if p.is_dir() and p.name in {"build", "dist"}]
    assert not named, f"folders named as build output: {named}"


# The Routes table: | route | build folder | run folder | what it ships | when | docs |
ROUTE_ROW = re.compile(r"^\| ([^|]+?) \| `([\w/.]+)` \| `([\w/.]+)` \|(.+)\|$", re.M)


def routes() -> list[tuple[str, str, str]]:
    text = ARCHITECTURE.read_text()
    section = text[text.index("## Routes"):]
    section = section[:section.index("\n## ", 4)]
    return [(route, build, run) for route, build, run, _ in ROUTE_ROW.findall(section)]


def test_the_routes_table_names_a_build_and_a_run_folder_for_each_route():
    found = routes()
    folders_named = [(route, build, run) for route, build, run in found if build.endswith("/") and run.endswith("/")]
    assert len(folders_named) >= 3, f"docs/architecture.md's Routes table names too few routes by folder: {found}"
    missing = [f"{route}: {path}" for route, build, run in found for path in (build, run)
               if not (PACKAGE / path).exists() or path.endswith("/") != (PACKAGE / path).is_dir()]
    assert not missing, "docs/architecture.md's Routes table names what does not exist: " + ", ".join(missing)
    sides = [p.relative_to(PACKAGE).as_posix() + "/" for side in SIDES for p in (PACKAGE / side).iterdir()
             if p.is_dir() and p.name not in {"__pycache__", "torch_internals"}]
    unnamed = sorted(set(sides) - {path for row in found for path in row[1:]})
    assert not unnamed, "route folders the Routes table does not name: " + ", ".join(unnamed)


def test_each_route_touches_torch_in_a_folder_named_as_its_run_side():
    """A route's touches of torch's internals are found from its name: run/<route>/ and
    run/torch_internals/<route>/."""
    runs = {p.name for p in (PACKAGE / "run").iterdir() if p.is_dir() and p.name not in {"__pycache__", "torch_internals"}}
    grouped = {p.name for p in (PACKAGE / "run" / "torch_internals").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert grouped <= runs, f"torch_internals/ groups named as no route's run folder: {sorted(grouped - runs)}"


def named_paths(text: str) -> set[str]:
    return set(MODULE_PATH.findall(text))


def test_the_path_check_reads_paths_as_written():
    text = "see `run/steps/shipped_steps.py`, builder/steps/step_capture.py's save_step and hatch_precompile/run/torch_internals/steps/aoti.py"
    assert named_paths(text) == {"run/steps/shipped_steps.py", "builder/steps/step_capture.py", "run/torch_internals/steps/aoti.py"}


@pytest.mark.parametrize("source", [
    *sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md", *modules(),
], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_path_named_exists(source):
    """A rename leaves no doc or docstring pointing at a file that is gone."""
    missing = sorted(p for p in named_paths(source.read_text()) if not (PACKAGE / p).is_file())
    assert not missing, f"{source.relative_to(ROOT)} names modules that do not exist: {', '.join(missing)}"


def map_block() -> str:
    text = ARCHITECTURE.read_text()
    return text[text.index("```\nhatch_precompile/"):text.index("```", text.index("```\nhatch_precompile/") + 3)]


def test_the_architecture_map_names_every_module():
    block = map_block()
    unnamed = [str(p.relative_to(PACKAGE)) for p in modules()
               if p.name not in block and str(p.relative_to(PACKAGE)) not in block]
    assert not unnamed, "docs/architecture.md's map does not name: " + ", ".join(unnamed)


# "Where to look": each answer names `path`'s `Qualified.name`; the check resolves both.
ANSWER = re.compile(r"`((?:hatch|tools|builder|child|run|protocol)(?:/[a-z_]+)*/[a-z_]+\.py)`'s\s+`([\w.]+)`")


def where_to_look() -> list[tuple[str, str]]:
    text = ARCHITECTURE.read_text()
    section = text[text.index("## Where to look"):]
    section = section[:section.find("\n## ", 4)] if "\n## " in section[4:] else section
    return ANSWER.findall(section)


def defines(path: str, qualname: str) -> bool:
    scope: list[ast.stmt] = ast.parse((PACKAGE / path).read_text()).body
    for part in qualname.split("."):
        found = next((node for node in scope if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                      and node.name == part), None)
        if found is None:
            return False
        scope = found.body
    return True


def test_where_to_look_leads_to_code_that_exists():
    answers = where_to_look()
    assert len(answers) >= 10, f"docs/architecture.md's 'Where to look' names too few places: {answers}"
    missing = [f"{path}'s {name}" for path, name in answers if not (PACKAGE / path).is_file() or not defines(path, name)]
    assert not missing, "docs/architecture.md's 'Where to look' names what does not exist: " + ", ".join(missing)


# The questions a newcomer asks first (issue 57's five, and one more), and the function each answer must lead to:
# where the decision is made. Each answer names at most three files: one decision, one place.
QUESTIONS = {
    "a": ("Where a loss step writes the caller's `.grad`.", ("run/steps/exported_step.py", "ExportedStep._gradients")),
    "b": ("Where every call's contract is checked.", ("run/steps/call_contract.py", "mismatch")),
    "c": ("Where the build decides a step cannot ship, and what it prints.", ("builder/steps/step_capture.py", "save_step")),
    "d": ("Whether the shipped caches are valid for this machine.", ("run/sets/verdict.py", "set_to_use")),
    "e": ("How `PRECOMPILE=0` gates the build.", ("run/switch.py", "enabled")),
    "f": ("Where a failed workload fails the build, or does not.", ("builder/capture_outcome.py", "outcome_of")),
}
MAX_FILES_PER_ANSWER = 3
BULLET = re.compile(r"^- \*\*\((\w)\) (.+?)\*\* (.*?)(?=^- \*\*|\Z)", re.M | re.S)


def answers() -> dict[str, tuple[str, str]]:
    text = ARCHITECTURE.read_text()
    section = text[text.index("## Where to look"):]
    section = section[:section.index("\n## ", 4)]
    return {key: (question, body) for key, question, body in BULLET.findall(section)}


@pytest.mark.parametrize("key", sorted(QUESTIONS))
def test_each_question_is_answered_in_at_most_three_files(key):
    question, (path, function) = QUESTIONS[key]
    found = answers()
    assert key in found, f"docs/architecture.md's 'Where to look' has no bullet **({key}) {question}**"
    written, body = found[key]
    assert written == question, f"({key}) asks {written!r}, not {question!r}"
    files = named_paths(body)
    assert 1 <= len(files) <= MAX_FILES_PER_ANSWER, f"({key}) names {len(files)} files: {sorted(files)}"
    assert (path, function) in ANSWER.findall(body), f"({key}) does not lead to {path}'s {function}"
    assert defines(path, function)


def test_the_answer_check_reads_bullets_as_written():
    text = "- **(a) Q one.** `run/x.py`'s `f` and\n  `run/y.py`'s `g`.\n- **(b) Q two.** none\n"
    assert [(k, q, named_paths(b)) for k, q, b in BULLET.findall(text)] == [
        ("a", "Q one.", {"run/x.py", "run/y.py"}), ("b", "Q two.", set())]
