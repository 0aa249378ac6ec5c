"""Every relative link of the README and the docs reaches a file, and every anchor a heading of it.

The documentation is plain Markdown read on the forge; this is its strict build: a page moved, renamed or
retitled without its links fails here, not in a reader's browser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$")
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "config").rglob("README.md")])


def _outside_code(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    """The anchors the forge gives ``page``'s headings: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    for line in _outside_code(page.read_text(encoding="utf-8")):
        if m := HEADING.match(line):
            found.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return found


def links(page: Path) -> list[str]:
    return [m.group(1) for line in _outside_code(page.read_text(encoding="utf-8")) for m in LINK.finditer(line)]


def test_the_pages_are_found() -> None:
    assert REPO / "README.md" in PAGES and REPO / "docs" / "install.md" in PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        goal = (page.parent / path).resolve() if path else page
        if not goal.exists():
            broken.append(f"{target}: no such file")
        elif anchor and goal.suffix == ".md" and anchor not in anchors(goal):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, broken


def test_the_readme_fits_on_a_page() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250
