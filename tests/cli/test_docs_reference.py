"""docs/performance.md and docs/mine.md are references, not lab logs: no sentence about how a figure was reached, at
most one "What we tried and did not keep" list (the last section). Every benchmark command the docs give names a
real script in bench/ with options that script has, and runs its --help. No page passes 600 lines, and every
reference into the annotation pages (docs/annotate*.md, "Section" or #anchor) names a section of that page."""

from __future__ import annotations

import re
import subprocess
import sys
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
_BENCH = re.compile(r"python3?\s+(?:-m\s+bench\.([\w.]+)|bench/([\w/]+)\.py)((?:\s+[^\s`#|)]+)*)")
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
    """(line number, script, options text) for each `python bench/S/X.py ...` or `python -m bench.S.X ...` (the
    script as `S/X`), with backslash continuations joined and `# comments` dropped."""
    found = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        start, line = number + 1, lines[number].split(" #")[0]
        while line.rstrip().endswith("\\") and number + 1 < len(lines):
            number += 1
            line = line.rstrip()[:-1].rstrip() + " " + lines[number].split(" #")[0].strip()
        for match in _BENCH.finditer(line):
            script = match.group(2) or match.group(1).replace(".", "/")
            found.append((start, script, match.group(3)))
        number += 1
    return found


def bench_problem(script: str, options: str) -> str | None:
    """Why `bench/<script>.py <options>` does not match the script, or None (the script as `subject/name`)."""
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
    text = (
        "run `python -m bench.mine.scale --images 10 \\\n    --stages mine` # --nope\npython bench/mine/exact_topk.py"
    )
    found = bench_commands(text)
    assert found == [(1, "mine/scale", " --images 10 --stages mine"), (3, "mine/exact_topk", "")]
    assert bench_problem("mine/scale", " --images 10 --stages mine") is None
    assert bench_problem("mine/scale", " --images 10 --imagez 3") == "bench/mine/scale.py has no option --imagez"
    assert bench_problem("mine/scaling", "") == "no bench/mine/scaling.py"
    assert bench_problem("nope", "") == "no bench/nope.py"


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


BENCH_SCRIPTS = sorted({command[1] for doc in DOCS for command in bench_commands(doc.read_text(encoding="utf-8"))})


@pytest.mark.slow
@pytest.mark.parametrize("script", BENCH_SCRIPTS)
def test_documented_bench_command_runs_its_help(script: str):
    """Every bench the docs name resolves as `python -m bench.<subject>.<name>` and parses --help (its imports
    too: a module path the move left behind fails here)."""
    if not (REPO / "bench" / f"{script}.py").is_file():
        pytest.fail(f"no bench/{script}.py")
    module = "bench." + script.replace("/", ".")
    result = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"python -m {module} --help: {result.stderr[-2000:]}"
    assert "usage:" in result.stdout, f"python -m {module} --help printed no usage"


def test_every_bench_module_the_docs_name_is_checked():
    assert len(BENCH_SCRIPTS) > 20
    assert all("/" in script for script in BENCH_SCRIPTS), BENCH_SCRIPTS


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
