"""docs/annotate.md's walk-through, from `csts-pipeline run --dataset sample` to a published dataset, runs as it
stands in the document: every command of its bash block, from a fresh folder, with the crowd answers it names."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from tests.conftest import REPO


def walkthrough_commands() -> list[list[str]]:
    """The `csts-pipeline` commands of the walk-through's bash block, continuations joined, comments dropped."""
    text = (REPO / "docs" / "annotate.md").read_text(encoding="utf-8")
    section = text[text.index("## Walk-through") :]
    start = section.index("```bash\n") + len("```bash\n")
    block = section[start : section.index("\n```", start)]
    joined = block.replace("\\\n", " ")
    return [line.split(" #")[0].split()[1:] for line in joined.splitlines() if line.startswith("csts-pipeline ")]


@pytest.mark.slow
def test_the_walkthrough_runs_from_run_to_a_published_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    commands = walkthrough_commands()
    assert commands[0] == ["run", "--dataset", "sample"] and commands[-1][:1] == ["export"]
    monkeypatch.chdir(tmp_path)  # the sample manifest's work_dir and data are relative to the current folder
    printed = []
    for command in commands:
        args = [str(REPO / a) if a.startswith("docs/") else a for a in command]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, f"{' '.join(command)}: {result.output}"
        printed.append(result.output)
    output = "\n".join(printed)
    for shown in (
        "6 workers scored, 5 qualified",
        "9 rows read, 1 excluded (not_qualified 1)",
        "8 of 8 tasks answered",
    ):
        assert shown in output
    assert "50 rows read, 2 excluded (not_qualified 2)" in output and "items: 15 kept, 1 not pertinent" in output
    assert "train 8, validation 2, test 4 rows" in output
    annotate = tmp_path / "runs" / "sample" / "annotate"
    with (annotate / "qualification" / "workers.csv").open(newline="") as handle:
        assert {r["worker_id"] for r in csv.DictReader(handle) if r["qualified"] == "false"} == {"X01"}
    assert sorted(p.name for p in (tmp_path / "runs" / "sample-hf" / "data").iterdir()) == [
        "test-00000-of-00001.parquet",
        "train-00000-of-00001.parquet",
        "validation-00000-of-00001.parquet",
    ]
