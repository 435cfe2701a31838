"""The docs hold together: every relative link reaches a file, and every #anchor a heading there."""

from __future__ import annotations

import re
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
