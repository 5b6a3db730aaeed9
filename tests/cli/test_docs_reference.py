"""docs/performance.md and docs/mine.md are references, not lab logs: no sentence about how a figure was reached, at
most one "What we tried and did not keep" list (the last section), and every benchmark command they give names a
real script in bench/ with options that script has."""

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
_BENCH = re.compile(r"python3?\s+(?:-m\s+bench\.(\w+)|bench/(\w+)\.py)((?:\s+[^\s`#|)]+)*)")
_OPTION = re.compile(r'add_argument\(\s*"(--[\w-]+)"')


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


def bench_commands(text: str) -> list[tuple[int, str, str]]:
    """(line number, script name, options text) for each `python bench/X.py ...` or `python -m bench.X ...`, with
    backslash continuations joined and `# comments` dropped."""
    found = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        start, line = number + 1, lines[number].split(" #")[0]
        while line.rstrip().endswith("\\") and number + 1 < len(lines):
            number += 1
            line = line.rstrip()[:-1].rstrip() + " " + lines[number].split(" #")[0].strip()
        for match in _BENCH.finditer(line):
            found.append((start, match.group(1) or match.group(2), match.group(3)))
        number += 1
    return found


def bench_problem(script: str, options: str) -> str | None:
    """Why `bench/<script>.py <options>` does not match the script, or None."""
    path = REPO / "bench" / f"{script}.py"
    if not path.is_file():
        return f"no bench/{script}.py"
    known = {"--help", *_OPTION.findall(path.read_text(encoding="utf-8"))}
    for token in options.split():
        name = token.split("=")[0]
        if re.fullmatch(r"--[A-Za-z][\w-]*", name) and name not in known:
            return f"bench/{script}.py has no option {name}"
    return None


def test_the_bench_check_catches_unknown_scripts_and_options():
    text = "run `python -m bench.scale --images 10 \\\n    --stages mine` # --nope\npython bench/mine.py"
    found = bench_commands(text)
    assert found == [(1, "scale", " --images 10 --stages mine"), (3, "mine", "")]
    assert bench_problem("scale", " --images 10 --stages mine") is None
    assert bench_problem("scale", " --images 10 --imagez 3") == "bench/scale.py has no option --imagez"
    assert bench_problem("scaling", "") == "no bench/scaling.py"


BENCH_COMMANDS = [
    pytest.param(command[1], command[2], id=f"{doc.name}:{command[0]}")
    for doc in DOCS
    for command in bench_commands(doc.read_text(encoding="utf-8"))
]


def test_the_docs_have_bench_commands_to_check():
    assert len(BENCH_COMMANDS) > 30


@pytest.mark.parametrize(("script", "options"), BENCH_COMMANDS)
def test_documented_bench_command_exists_with_its_options(script: str, options: str):
    problem = bench_problem(script, options)
    assert problem is None, problem


@pytest.mark.parametrize("page", REFERENCE_PAGES, ids=lambda p: p.name)
def test_inline_code_stays_on_one_line(page: Path):
    """A command split over two lines of prose escapes the command checks (here and tests/cli/test_docs_commands.py)."""
    fenced = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            assert line.count("`") % 2 == 0, f"{page.name}:{number}: inline code runs on to the next line"
