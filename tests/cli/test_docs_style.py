"""The docs read as pages for users: sections are named, not numbered (a number goes stale when a page is split
or reordered, and so does every "section 9" that points at it), and no prose line passes 120 characters (tables and
fenced code aside). The code names functions and concepts, never a doc section number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
WIDTH = 120

# `## 3. Import`, `## 1.2 Import`, `## 7) Import`, `## 4 Import`; not `### 10 million images` (a figure)
_NUMBERED = re.compile(r"^#{1,6}\s+\d+(?:\.\d+)*(?:[.)]|\s+[A-Z`])")
# a pointer into a page by its number: "section 9", "steps 4-6" (the paper's "Section 4.1" is the paper's)
_SECTION_NUMBER = re.compile(r"\b(?:sections?|steps?)\s+\d")
# in code: a doc file followed by a section number, or a number "of" a doc file
_CODE_SECTION_NUMBER = re.compile(
    r"\.md\W{0,3}\s*(?:sections?|steps?|§)\s*\d|\b(?:sections?|steps?)\s+\d+\s+of\s+(?:docs/)?[\w-]+\.md", re.I
)


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) for every line outside fenced code blocks that is not a table row."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and not line.lstrip().startswith("|"):
            found.append((number, line))
    return found


def style_problems(text: str) -> list[str]:
    """What breaks the docs' style, one line each: numbered headings, references by number, long prose lines."""
    problems = []
    for number, line in prose_lines(text):
        if _NUMBERED.match(line):
            problems.append(f"{number}: numbered heading {line.strip()!r}: name the section")
        elif _SECTION_NUMBER.search(line):
            problems.append(f"{number}: a section pointed at by number: name it")
        if len(line) > WIDTH:
            problems.append(f"{number}: prose line of {len(line)} characters (at most {WIDTH}): rewrap it")
    return problems


def test_the_style_check_catches_numbers_and_long_lines():
    assert style_problems("# Title\n\n## 0. Qualification\n### 1.2 Sub\n## 7) Split\n## 4 `annotate split`") == [
        "3: numbered heading '## 0. Qualification': name the section",
        "4: numbered heading '### 1.2 Sub': name the section",
        "5: numbered heading '## 7) Split': name the section",
        "6: numbered heading '## 4 `annotate split`': name the section",
    ]
    assert style_problems("### 10 million images on the VM\n## Qualification\nthe paper's Section 4.1") == []
    assert style_problems("as in [section 9](annotate.md) and steps 4-6") == [
        "1: a section pointed at by number: name it"
    ]
    long = "word " * 30
    assert style_problems(f"{long}\n\n| {long} |\n\n```\n{long}\n```\n") == [
        f"1: prose line of {len(long)} characters (at most 120): rewrap it"
    ]
    assert style_problems("x" * 120) == []


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_docs_name_their_sections_and_keep_prose_lines_short(page: Path):
    problems = style_problems(page.read_text(encoding="utf-8"))
    assert problems == [], f"{page.relative_to(REPO)}: {problems}"


def code_files() -> list[Path]:
    """The package's, the benches' and the tests' Python, Markdown and JSON files."""
    return [
        path
        for folder in ("csts_pipeline", "bench", "tests")
        for path in (REPO / folder).rglob("*")
        if path.suffix in (".py", ".md", ".json") and "__pycache__" not in path.parts and path.stat().st_size < 300_000
    ]


def test_the_code_check_catches_doc_section_numbers():
    assert _CODE_SECTION_NUMBER.search("(docs/annotate.md, section 9)")
    assert _CODE_SECTION_NUMBER.search("(docs/annotate.md, steps 2-4)")
    assert _CODE_SECTION_NUMBER.search("(section 10 of annotate-labels.md)")
    assert not _CODE_SECTION_NUMBER.search("the paper's Section 4.1; one step 2 of the E-step")
    assert not _CODE_SECTION_NUMBER.search("`annotate import --stage ratings` (steps.ratings.import_ratings)")


def test_code_names_no_doc_section_number():
    """A docstring or comment says which function or concept it means (`steps.ratings.import_ratings`, "the expert
    file's rules"), not "docs/annotate.md, section 9": the number breaks when the page changes."""
    found = [
        f"{path.relative_to(REPO)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)!r}"
        for path in code_files()
        if path.resolve() != Path(__file__).resolve()
        for text in [path.read_text(encoding="utf-8")]
        for match in _CODE_SECTION_NUMBER.finditer(text)
    ]
    assert found == []
