"""docs/performance.md and docs/mine.md are references, not lab logs: no sentence about how a figure was reached, at
most one "What we tried and did not keep" list (the last section). No page passes 600 lines, and every reference
into the annotation pages (docs/annotate*.md, "Section" or #anchor) names a section of that page. The benchmark
commands the docs give are checked beside the benches (bench/test_bench_commands.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

REFERENCE_PAGES = [REPO / "docs" / "performance.md", REPO / "docs" / "mine.md"]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TRIED = "what we tried and did not keep"

# the history of a figure belongs to the commits: each phrase matched as whole words, any case
LAB_LOG_PHRASES = [
    "since",
    "superseded",
    "the issue",
    "stopped",
    "was stopped",
    "resumed",
    "a second run",
    "second run",
    "this session",
    "fresh machine",
    "earlier",
]
_LAB_LOG = re.compile(r"\b(" + "|".join(re.escape(p).replace(r"\ ", r"\s+") for p in LAB_LOG_PHRASES) + r")\b", re.I)


def lab_log_hits(text: str) -> list[tuple[int, str]]:
    """(line number, phrase) for every lab-log phrase in the text."""
    return [
        (number, match.group(1))
        for number, line in enumerate(text.splitlines(), start=1)
        for match in _LAB_LOG.finditer(line)
    ]


def test_the_phrase_check_catches_lab_log_sentences():
    assert lab_log_hits("The run was stopped after 19 blocks.") == [(1, "was stopped")]
    assert [p for _, p in lab_log_hits("A second run, on a fresh machine,\nsince the first")] == [
        "A second run",
        "fresh machine",
        "since",
    ]
    assert lab_log_hits("Superseded by THE ISSUE's figure, as EARLIER") != []
    # a record key or a feature of the tool is not a lab log
    assert lab_log_hits("`search.blocks_resumed` counts them; a killed search resumes; the tuning stops") == []


@pytest.mark.parametrize("page", REFERENCE_PAGES, ids=lambda p: p.name)
def test_reference_pages_do_not_read_as_a_lab_log(page: Path):
    hits = lab_log_hits(page.read_text(encoding="utf-8"))
    assert not hits, f"{page.name}: lab-log phrases (say what holds, not how it was reached): {hits}"


@pytest.mark.parametrize("page", REFERENCE_PAGES, ids=lambda p: p.name)
def test_at_most_one_tried_list_and_it_comes_last(page: Path):
    headings = [line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    tried = [h for h in headings if TRIED in h.lower()]
    assert len(tried) <= 1, f"{page.name}: {len(tried)} '{TRIED}' sections"
    if tried:
        assert headings[-1] == tried[0], f"{page.name}: '{tried[0]}' is not the last section"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_no_page_passes_600_lines(page: Path):
    assert len(page.read_text(encoding="utf-8").splitlines()) <= 600, f"{page.name}: split it by reader"


ANNOTATE_PAGES = sorted((REPO / "docs").glob("annotate*.md"))
_SECTION_REF = re.compile(r"""(annotate[\w-]*\.md)(?:,\s*|\s+)\(?["']([^"'\n]+)""")
_ANCHOR_REF = re.compile(r"\]\((annotate[\w-]*\.md)?#([\w-]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (outside fenced code)."""
    found, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"^#{1,6} (.+?)\s*$", line)):
            found.add(re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-"))
    return found


def section_references() -> list[tuple[str, str, str]]:
    """(where, page, phrase) for every `annotate*.md, "Section"` in the code, tests, benches and docs."""
    found = []
    files = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    for folder in ("csts_pipeline", "tests", "bench"):
        files += [
            p for p in (REPO / folder).rglob("*") if p.suffix in (".py", ".md", ".json") and p.stat().st_size < 300_000
        ]
    for path in files:
        text = path.read_text(encoding="utf-8")
        for match in _SECTION_REF.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{path.relative_to(REPO)}:{line}", match.group(1), match.group(2)))
    return found


def test_the_annotation_docs_are_a_guide_and_references():
    names = {p.name for p in ANNOTATE_PAGES}
    assert {
        "annotate.md",
        "annotate-platforms.md",
        "annotate-labels.md",
        "annotate-models.md",
        "annotate-audit.md",
    } <= names
    guide = (REPO / "docs" / "annotate.md").read_text(encoding="utf-8")
    assert all(f"]({name})" in guide for name in names - {"annotate.md"}), "the guide links every reference page"
    assert len(section_references()) > 20


@pytest.mark.parametrize("page", ANNOTATE_PAGES, ids=lambda p: p.name)
def test_references_into_the_annotation_pages_name_their_sections(page: Path):
    """A docstring's `docs/annotate-labels.md, "Label quality"` names a heading or a bold term of that page, and a
    link's #anchor is a heading of the page it names (the split keeps every pointer on its section)."""
    text = " ".join(page.read_text(encoding="utf-8").lower().split())
    wrong = [
        f"{where}: {phrase!r}"
        for where, name, phrase in section_references()
        if name == page.name and " ".join(phrase.lower().split()) not in text
    ]
    assert wrong == [], f"not in docs/{page.name}: {wrong}"
    for other in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        for match in _ANCHOR_REF.finditer(other.read_text(encoding="utf-8")):
            target = match.group(1) or (other.name if other.parent.name == "docs" else None)
            if target == page.name:
                assert match.group(2) in anchors(page), f"{other.name}: #{match.group(2)} is no heading of {page.name}"


@pytest.mark.parametrize("page", REFERENCE_PAGES, ids=lambda p: p.name)
def test_inline_code_stays_on_one_line(page: Path):
    """A command split over two lines of prose escapes the command checks (here and tests/cli/test_docs_commands.py)."""
    fenced = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            assert line.count("`") % 2 == 0, f"{page.name}:{number}: inline code runs on to the next line"
