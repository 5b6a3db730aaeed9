"""Every `csts-pipeline ...` command line in README.md and docs/*.md names a real command and real options."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main

from csts_pipeline.cli import app
from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_INLINE = re.compile(r"`([^`\n]+)`")


def _command_lines(text: str) -> list[tuple[int, str]]:
    """(line number, command) for each `csts-pipeline ...` in a fenced block (backslash continuations joined,
    `$ ` prompts and `# comments` dropped) or in inline code that starts with it."""
    found: list[tuple[int, str]] = []
    lines = text.splitlines()
    in_block = False
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            if pending is not None:
                start, joined = pending
                joined += " " + line.strip()
            else:
                stripped = line.strip().removeprefix("$ ")
                if not stripped.startswith("csts-pipeline "):
                    continue
                start, joined = number, stripped
            if joined.endswith("\\"):
                pending = (start, joined[:-1].rstrip())
                continue
            pending = None
            found.append((start, joined.split(" #")[0].strip()))
            continue
        for span in _INLINE.findall(line):
            if span.strip().startswith("csts-pipeline"):
                found.append((number, span.strip()))
    return found


COMMANDS = [
    pytest.param(doc, line, command, id=f"{doc.name}:{line}")
    for doc in DOCS
    for line, command in _command_lines(doc.read_text(encoding="utf-8"))
]


def test_the_docs_have_command_lines_to_check():
    assert len(COMMANDS) > 30
    joined = [c.values[2] for c in COMMANDS]
    # a backslash-continued block is one command
    assert any(c.startswith("csts-pipeline train --train") and "--out" in c for c in joined)


def _problem(command: str) -> str | None:
    """Why the command line does not match the CLI, or None."""
    tokens = shlex.split(command)[1:]
    current: Any = typer.main.get_command(app)  # typer's own click: groups are told by their `commands`
    path = ["csts-pipeline"]
    rest = tokens
    while hasattr(current, "commands") and rest and not rest[0].startswith("-"):
        name = rest[0]
        if name.isupper():  # a placeholder such as COMMAND
            return None
        if name not in current.commands:
            return f"no command {' '.join([*path, name])!r}"
        current, path, rest = current.commands[name], [*path, name], rest[1:]
    known = {"--help"} | {opt for param in current.params for opt in (*param.opts, *param.secondary_opts)}
    for token in (t.strip("[]") for t in rest):
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", token) and token.split("=")[0] not in known:
            return f"{' '.join(path)} has no option {token.split('=')[0]}"
    if not rest or "--help" in rest or hasattr(current, "commands"):
        return None  # a command named in prose (`csts-pipeline train reads ...`), or a group
    if any(token.startswith("[") for token in rest):
        return None  # a synopsis with optional parts (`[--out DIR]`): the option names are checked, not the values
    try:  # the values too: types, choices, required options and stray arguments, as the CLI would parse them
        current.make_context(path[-1], list(rest))
    except Exception as exc:  # typer vendors its own click: its exceptions are not click's
        if not hasattr(exc, "format_message"):
            raise
        return f"{' '.join(path)}: {exc.format_message()}"
    return None


def test_the_checker_catches_unknown_commands_and_options():
    assert _problem("csts-pipeline run --dataset sample --out x --force") is None
    assert _problem("csts-pipeline annotate split -d coco --ratios 1:1:1") is None
    assert _problem("csts-pipeline COMMAND --help") is None
    assert _problem("csts-pipeline embedd --dataset sample") == "no command 'csts-pipeline embedd'"
    assert _problem("csts-pipeline annotate merge") == "no command 'csts-pipeline annotate merge'"
    assert _problem("csts-pipeline status --force") == "csts-pipeline status has no option --force"
    assert _problem("csts-pipeline train --k 5") == "csts-pipeline train has no option --k"
    assert _problem("csts-pipeline annotate audit --labels FILE --reference FILE [--out DIR] [--seed N]") is None
    assert _problem("csts-pipeline annotate audit --labels FILE [--outt DIR]") == (
        "csts-pipeline annotate audit has no option --outt"
    )
    assert _problem("csts-pipeline mine --dataset sample --k many").startswith(
        "csts-pipeline mine: Invalid value for '--k': "
    )
    assert _problem("csts-pipeline train --out x") == "csts-pipeline train: Missing option '--train'."
    assert (
        _problem("csts-pipeline status --dataset sample extra")
        == "csts-pipeline status: Got unexpected extra argument(s) (extra)"
    )


@pytest.mark.parametrize(("doc", "line", "command"), COMMANDS)
def test_documented_command_exists_with_its_options(doc: Path, line: int, command: str):
    problem = _problem(command)
    assert problem is None, f"{doc.name}:{line}: {command!r}: {problem}"
