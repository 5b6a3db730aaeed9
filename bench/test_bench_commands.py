"""Every benchmark command the docs give (README.md, docs/*.md) names a real bench with options that bench has, and
runs its --help as `python -m bench.<subject>.<name>` from the repository root (its imports too: a module path a move
left behind fails here)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_BENCH = re.compile(r"python3?\s+(?:-m\s+bench\.([\w.]+)|bench/([\w/]+)\.py)((?:\s+[^\s`#|)]+)*)")
_OPTION = re.compile(r'add_argument\(\s*"(--[\w-]+)"')
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


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
        [sys.executable, "-m", module, "--help"],
        cwd=REPO,
        env=os.environ | OFFLINE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"python -m {module} --help: {result.stderr[-2000:]}"
    assert "usage:" in result.stdout, f"python -m {module} --help printed no usage"


def test_every_bench_module_the_docs_name_is_checked():
    assert len(BENCH_SCRIPTS) > 20
    assert all("/" in script for script in BENCH_SCRIPTS), BENCH_SCRIPTS
