"""Every relative link in README.md, CHANGELOG.md and docs/*.md points at a file that exists,
and a `#fragment` into a Markdown page names one of its headings.

Links inside code (fenced blocks, inline spans) are not links and are skipped; absolute URLs
are not checked (no network in tests). Headings become anchors as mkdocs and GitHub make them.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """The anchor of a heading, as mkdocs' toc extension (and GitHub, for these headings)
    makes it: markup and punctuation dropped, lower case, runs of spaces and hyphens as one
    hyphen."""
    text = heading.replace("`", "")
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8")))}


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(root)}: ({target})"
        if not linked.exists():
            problems.append(f"{where}: {path_part} does not exist")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            problems.append(f"{where}: no heading makes #{fragment} in {linked.name}")
    return problems


def test_the_pages_are_found() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "index.md", "getting-started.md", "performance.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_and_a_wrong_anchor_are_caught(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Some `code` here, too\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#some-code-here-too) [gone](missing.md) [bad](other.md#nope)\n"
        "`[in code](missing-too.md)` [web](https://example.com/x)\n"
        "```\n[fenced](missing-three.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "page.md: (missing.md): missing.md does not exist",
        "page.md: (other.md#nope): no heading makes #nope in other.md",
    ]
