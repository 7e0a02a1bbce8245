"""The project's Markdown documents link only to files and headings that exist.

The README points into ``benchmarks/README.md`` (the measurements) and ``deploy/README.md`` (the
manifests) and they point back; a heading renamed or moved on one side must not leave a link
that lands on the top of a 900-line page. Anchors follow GitHub's rule: the heading in lower
case, every character but letters, digits, ``-``, ``_`` and spaces dropped, spaces as ``-``,
and ``-1``, ``-2`` ... appended to repeated headings.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"#{1,6} (.+)")


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown`` (fenced code blocks skipped)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.fullmatch(line)
        if match is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(document: Path) -> list[str]:
    """Every relative link of ``document`` whose file or heading does not exist."""
    broken = []
    for target in LINK.findall(document.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif (
            anchor
            and linked.suffix == ".md"
            and anchor not in anchors(linked.read_text(encoding="utf-8"))
        ):
            broken.append(f"{target}: no such heading in {path or document.name}")
    return broken


def documents() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    return [ROOT / name for name in listed.stdout.split()]


def test_anchors_follow_githubs_rule() -> None:
    text = "# A b\n### Recalibration (`models.NAME.recalibrate`, on by default)\n## A b\n"
    text += "```\n# not a heading\n```\n### Alert MonitorDown\n"
    assert anchors(text) == {
        "a-b",
        "recalibration-modelsnamerecalibrate-on-by-default",
        "a-b-1",
        "alert-monitordown",
    }


def test_a_link_to_a_missing_heading_or_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Efficiency\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "## Here\n[a](#here) [b](other.md#efficiency) [c](#gone) [d](other.md#gone) [e](none.md)"
        " [f](https://example.invalid/x#y)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "#gone: no such heading in page.md",
        "other.md#gone: no such heading in other.md",
        "none.md: no such file",
    ]


def test_every_link_of_the_projects_documents_resolves() -> None:
    found = documents()
    assert ROOT / "README.md" in found and ROOT / "benchmarks" / "README.md" in found
    broken = {str(doc.relative_to(ROOT)): broken_links(doc) for doc in found}
    assert {doc: links for doc, links in broken.items() if links} == {}
