"""The command blocks of README.md and docs/*.md run as written, where they can here: each chosen command line, as
the document writes it, through the shell from a fresh folder with docs/ and bench/ beside it (as from the
repository root), with the installed `csts-pipeline` on this checkout's package. Every other command line of a
block is listed under the reason it is not run here (a GPU, the network, data not shipped, hours); a new command
line in the docs fails `test_every_documented_command_is_run_or_said_why_not` until it is one or the other."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELLS = {"bash", "sh", "console", ""}
PROGRAMS = ("csts-pipeline", "python", "python3", "make", "pip", "uv", "git", ".venv/bin/pip")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def block_commands(text: str) -> list[str]:
    """The command lines of a document's shell blocks (```bash, ```console and plain ones): continuations
    joined, `$ ` prompts and `# comments` dropped, only lines that start a program of PROGRAMS (after
    `NAME=value` settings), so the file excerpts of plain blocks are not taken for commands."""
    found, kind, pending = [], None, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            kind = line.strip()[3:].strip() if kind is None else None
            continue
        if kind not in SHELLS:
            continue
        line = pending + line.strip().removeprefix("$ ")
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        command = re.split(r"\s+#", line)[0].strip()
        program = re.sub(r"^(\w+=\S*\s+)*", "", command).split(" ")[0]
        if program in PROGRAMS:
            found.append(command)
    return found


# what is run: a name -> (document, its command lines in order as the document writes them, what the output shows)
RUN: dict[str, tuple[str, list[str], list[str]]] = {
    "the sample end to end and its report": (
        "docs/report.md",
        ["csts-pipeline run --dataset sample", "csts-pipeline report --dataset sample"],
        ["525 (1.7%)", "runs/sample/report/index.html"],
    ),
    "STS-B zero-shot on the shipped sample": (
        "docs/train.md",
        [
            "csts-pipeline evaluate --task stsb --data docs/examples/stsb/sts-test-sample.csv "
            "--model packaged:all-MiniLM-L6-v2"
        ],
        ["sts-test-sample     300     80.21     81.87"],
    ),
    "the generated C-STS set the prompting runs read": (
        "docs/train.md",
        [
            'python -c "from pathlib import Path; from csts_pipeline.testing.train_sample import write_sample_splits; '
            "write_sample_splits(Path('runs/csts-gen'), {'train': 300, 'validation': 100})\""
        ],
        [],
    ),
}

# why the others are not run here: the first reason with a pattern that matches the command line
NOT_RUN: dict[str, tuple[str, ...]] = {
    "the full COCO or Flickr30K data (downloads, a GPU, hours)": (
        r"--dataset (coco|flickr30k)",
        r"runs/coco\b",
        r"\bmy\.yaml\b",
    ),
    "a language model server or a hosted API (network)": (r"--endpoint", r"s3://", r"gs://"),
    "the C-STS authors' files or STS-B, not shipped": (r"\bdata/csts_", r"PATH/TO/"),
    "a GPU or hours of CPU (docs/performance.md's measurements; bench/test_bench_commands.py runs their --help)": (
        r"--device cuda",
        r"bench[./]",
    ),
    "a model of a minute or more on a CPU (SmolLM2, a tiny GPT-2 on 200 rows, Flan-T5) or a Ray cluster": (
        r"SmolLM2-135M",
        r"runs/tiny-gpt2",
        r"google/flan-t5",
        r"--executor ray",
    ),
    "installing or locking (network)": (r"^python3 -m venv", r"^\.venv/bin/pip", r"^pip ", r"^make lock", r"^git diff"),
    "the whole test suite, or a test file of it": (r"^make test", r"-m pytest"),
    "make sample: `csts-pipeline run --dataset sample`, run above": (r"^make sample",),
    "a manifest the reader changed after a run (the stale-upstream refusals; tests/frame test them)": (
        r"-m sample\.yaml",
    ),
    "a second run of the reader's own to compare with (runs/strict)": (r"runs/strict",),
    "a crowd's results file of the reader's own (the guide's placeholders)": (
        r"--results (Batch_\d|batch|first|second|people|project-)",
        r"--out runs/(first|second|batch|trained|check)\b",
        r"--model runs/trained",
    ),
    "the worked example: tests/annotate/test_annotate.py runs its chain and compares the output (its train of 8 "
    "rows shows the mechanics only; tests/train train)": (r"runs/annotate-example",),
    "the annotate walk-through on the sample: tests/cli/test_walkthrough.py runs it": (
        r"^csts-pipeline (annotate|export) .*--dataset sample\b",
    ),
}


def why_not(command: str) -> str | None:
    """The reason a documented command line is not run here, or None."""
    return next((why for why, patterns in NOT_RUN.items() if any(re.search(p, command) for p in patterns)), None)


def _documented() -> list[tuple[str, str]]:
    return [
        (doc.relative_to(REPO).as_posix(), command)
        for doc in DOCS
        for command in block_commands(doc.read_text(encoding="utf-8"))
    ]


def _run_lines() -> set[str]:
    return {line for _, lines, _ in RUN.values() for line in lines}


def test_the_block_reader_joins_continuations_and_skips_excerpts():
    text = '```console\n$ csts-pipeline a \\\n    --b c  # note\n42 rows\n```\n```\n"x","y"\n```\n'
    text += "```bash\nFOO=1 python -m x  # y\n```\n"
    assert block_commands(text) == ["csts-pipeline a --b c", "FOO=1 python -m x"]


def test_every_documented_command_is_run_or_said_why_not():
    run = _run_lines()
    unexplained = [
        f"{doc}: {command}" for doc, command in _documented() if command not in run and why_not(command) is None
    ]
    assert not unexplained, "run these in RUN, or say in NOT_RUN why not:\n" + "\n".join(unexplained)


@pytest.mark.parametrize("name", sorted(RUN))
def test_each_command_to_run_is_written_so_in_its_document(name: str):
    doc, lines, _ = RUN[name]
    written = block_commands((REPO / doc).read_text(encoding="utf-8"))
    assert [line for line in lines if line not in written] == [], f"{doc} no longer writes these"


def _shell(tmp_path: Path, command: str) -> str:
    """`command` through bash in `tmp_path`, with docs/ and bench/ beside it and this checkout's package."""
    for name in ("docs", "bench"):
        if not (tmp_path / name).exists():
            (tmp_path / name).symlink_to(REPO / name)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = os.environ | OFFLINE | {"PATH": path, "PYTHONPATH": str(REPO)}
    result = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    printed = result.stdout + result.stderr
    assert result.returncode == 0, f"{command}: exit {result.returncode}\n{printed[-3000:]}"
    return printed


def _commands(tmp_path: Path) -> list[str]:
    """The commands `csts-pipeline --help` names."""
    shown = _shell(tmp_path, "csts-pipeline --help")
    return re.findall(r"^│ ([a-z][\w-]*) ", shown, flags=re.M)


def test_the_command_line_shows_its_help(tmp_path: Path):
    commands = _commands(tmp_path)
    assert {"run", "status", "annotate", "train", "evaluate", "export", "report"} <= set(commands), commands


@pytest.mark.slow
def test_each_command_shows_its_help(tmp_path: Path):
    """README: `csts-pipeline COMMAND --help` lists the rest."""
    commands = _commands(tmp_path)
    helps = _shell(tmp_path, " && ".join(f"csts-pipeline {command} --help" for command in commands))
    assert helps.count("Usage: csts-pipeline ") == len(commands)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUN))
def test_the_documented_commands_run_as_written(name: str, tmp_path: Path):
    doc, lines, shown = RUN[name]
    printed = "".join(_shell(tmp_path, line) for line in lines)
    for expected in shown:
        assert expected in printed, f"{doc}: {expected!r} not in what the commands printed:\n{printed[-3000:]}"
