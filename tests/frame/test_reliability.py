"""Nothing is lost: failed reruns leave the committed output alone, damaged outputs are noticed on read, runs
killed at any moment resume to the content of a clean run, and two runs on one folder do not corrupt it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.failpoints import FAILPOINT
from tests.conftest import STAGES, contents

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "csts_pipeline", *args]
    return subprocess.run(command, cwd=REPO, env=env or ENV, capture_output=True, text=True, check=False)


def leftovers(work: Path) -> list[Path]:
    """Staging folders, swapped-out folders and temporary files: none may outlive a finished run."""
    hidden = [p for p in work.glob(".*") if p.is_dir()]
    return hidden + [p for p in work.rglob(".*.tmp")]


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """The sample run once, start to finish."""
    work = tmp_path_factory.mktemp("clean") / "work"
    result = cli("run", "--dataset", "sample", "--out", str(work))
    assert result.returncode == 0, result.stderr
    return work


@pytest.fixture
def done(clean: Path, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    shutil.copytree(clean, work)
    return work


def seeded(clean: Path, tmp_path: Path) -> Path:
    """An empty work folder holding only the clean run's sentence-embedding cache, so reruns skip encoding."""
    work = tmp_path / "work"
    work.mkdir(parents=True)
    shutil.copytree(clean / "text_embeddings", work / "text_embeddings")
    return work


@pytest.mark.parametrize(
    "args",
    [
        ["mine", "--k", "500"],
        ["filter", "--text-encoder", "/nonexistent/model"],
        ["filter", "--device", "cdua"],
        ["embed", "--device", "cuda:7"],
    ],
)
@pytest.mark.slow
def test_a_failed_rerun_leaves_every_stage_unchanged(done: Path, args: list[str]):
    before = {p: p.read_bytes() for p in done.rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    result = CliRunner().invoke(app, [*args, "--dataset", "sample", "--out", str(done), "--force"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output
    after = {p: p.read_bytes() for p in done.rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    assert after.keys() - before.keys() <= {p for p in after if ".next" in str(p)}
    assert all(after[p] == content for p, content in before.items())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "args"),
    [("mine:after-unit", ["mine", "--k", "3"]), ("filter:before-swap", ["filter", "--min-cosine", "0.5"])],
)
def test_a_rerun_killed_after_staging_leaves_every_stage_unchanged(done: Path, point: str, args: list[str]):
    """Unlike the failures above, these reruns die with their new output staged (in part, or whole with its
    record): the committed folders keep every byte until a swap."""
    stage = point.split(":")[0]
    before = {p: p.read_bytes() for p in done.rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    killed = cli(*args, "--dataset", "sample", "--out", str(done), env={**ENV, FAILPOINT: point})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    staging = done / f".{stage}.next"
    assert (staging / "_units").is_dir() and list((staging / "_units").iterdir())
    assert (staging / "_stage.json").is_file() == point.endswith("before-swap")
    after = {p: p.read_bytes() for p in done.rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    assert {p for p in after.keys() - before.keys() if ".next" not in str(p)} == set()
    assert [p for p, content in before.items() if after.get(p) != content] == []


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "shard"), [("embed", "embeddings"), ("mine", "candidates"), ("filter", "kept")])
def test_a_missing_shard_makes_the_stage_incomplete_and_the_next_refuse(done: Path, stage: str, shard: str):
    victim = sorted((done / stage / shard).glob("part-*.parquet"))[-1]
    victim.unlink()
    status = CliRunner().invoke(app, ["status", "--dataset", "sample", "--out", str(done)])
    line = next(line for line in status.output.splitlines() if line.startswith(stage))
    assert "incomplete" in line and str(victim) in status.output
    following = STAGES[STAGES.index(stage) + 1] if stage != "filter" else None
    if following is not None:
        result = CliRunner().invoke(app, [following, "--dataset", "sample", "--out", str(done)])
        assert result.exit_code == 2
        assert f"{victim}: missing" in result.output and f"`csts-pipeline {stage} --force`" in result.output


@pytest.mark.slow
def test_a_corrupt_record_is_named_not_taken_for_missing(done: Path):
    record = done / "mine" / "_stage.json"
    record.write_text('{"stage": "mine", "counts": ')
    status = CliRunner().invoke(app, ["status", "--dataset", "sample", "--out", str(done)])
    assert f"{record}: corrupt" in status.output
    result = CliRunner().invoke(app, ["filter", "--dataset", "sample", "--out", str(done)])
    assert result.exit_code == 2 and f"{record}: corrupt" in result.output


@pytest.mark.slow
def test_standard_readers_read_every_table_even_beside_a_crashed_write(done: Path):
    for stage in STAGES:
        for table in (p for p in (done / stage).iterdir() if p.is_dir()):
            (table / ".part-00009.parquet.123.tmp").write_bytes(b"half a shard")
            assert ds.dataset(table, format="parquet").to_table().num_rows > 0


def record(work: Path, stage: str) -> dict:
    return json.loads((work / stage / "_stage.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES)
def test_a_run_killed_in_the_middle_of_a_stage_resumes_to_the_clean_content(clean: Path, tmp_path: Path, stage: str):
    """Killed by a failpoint right after the stage's first unit is done: the kill lands inside the work (exit
    -9), nothing of the stage is committed, and the next run reuses that unit instead of recomputing it."""
    work = seeded(clean, tmp_path)
    killed = cli("run", "--dataset", "sample", "--out", str(work), env={**ENV, FAILPOINT: f"{stage}:after-unit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (work / stage).exists() and (work / f".{stage}.next" / "_units").is_dir()
    result = cli("run", "--dataset", "sample", "--out", str(work))
    assert result.returncode == 0, result.stderr
    resumed = record(work, stage)
    assert resumed["resumed"] is True and resumed["units_reused"] == 1 < resumed["units"]
    assert contents(work) == contents(clean)
    assert leftovers(work) == []


@pytest.mark.slow
@pytest.mark.parametrize("point", ["embed:before-swap", "mine:between-renames", "filter:before-record"])
def test_a_run_killed_inside_a_commit_recovers(clean: Path, done: Path, point: str):
    """A kill after the record is staged (before-swap, between-renames) is completed by the next run, which finds
    the stage up to date; one before the record resumes every unit (all reused), computing none again."""
    stage = point.split(":")[0]
    if point.endswith("before-record"):  # no committed output of the same fingerprint: the rerun must do the work
        shutil.rmtree(done / stage)
    killed = cli("run", "--dataset", "sample", "--out", str(done), "--force", env={**ENV, FAILPOINT: point})
    assert killed.returncode == -signal.SIGKILL
    staging = done / f".{stage}.next"
    staged = json.loads((staging / "_stage.json").read_text()) if (staging / "_stage.json").is_file() else None
    assert (staged is None) == point.endswith("before-record")
    status = CliRunner().invoke(app, ["status", "--dataset", "sample", "--out", str(done)])
    assert status.exit_code == 0 and "Traceback" not in status.output
    result = cli("run", "--dataset", "sample", "--out", str(done))
    assert result.returncode == 0, result.stderr
    if point.endswith("before-record"):
        finished = record(done, stage)
        assert finished["resumed"] is True and finished["units_reused"] == finished["units"] > 0
    else:  # the killed run's own commit, completed: not the old output, not a recomputation
        assert f"up to date: {done / stage}" in result.stdout, result.stdout
        assert record(done, stage)["timings"] == staged["timings"]
    assert contents(done) == contents(clean)
    assert leftovers(done) == [], stage


@pytest.mark.slow
def test_two_runs_at_once_on_one_folder(clean: Path, tmp_path: Path):
    work = seeded(clean, tmp_path)
    command = [sys.executable, "-m", "csts_pipeline", "run", "--dataset", "sample", "--out", str(work)]
    runs = [subprocess.Popen(command, cwd=REPO, env=ENV, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors = [run.communicate()[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], errors
    assert not any("Traceback" in error for error in errors)
    assert contents(work) == contents(clean)
    assert leftovers(work) == []
