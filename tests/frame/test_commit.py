"""The one commit (pipeline.commit.OutputFolder) for train, the annotate steps and the HF export: killed inside a
commit, each leaves its committed output whole; two writers serialise; damaged files are not "up to date"; an
output in a URL work_dir's cache is published to the store."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from csts_pipeline.pipeline import storage
from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.failpoints import FAILPOINT
from csts_pipeline.pipeline.locks import lock_path
from csts_pipeline.pipeline.records import read_record
from csts_pipeline.stages.annotate.steps import csts_split
from csts_pipeline.stages.annotate.steps.options import SplitOptions
from tests.annotate.test_annotate import kept, kept_dir, rated  # noqa: F401
from tests.train.test_train import csts_files, tiny_bert  # noqa: F401

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str | Path, failpoint: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    env.pop(FAILPOINT, None)
    if failpoint:
        env[FAILPOINT] = failpoint
    command = [sys.executable, "-m", "csts_pipeline", *map(str, args)]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def killed_inside_the_commit(folder: Path, point: str, *args: str | Path) -> None:
    """Run `args` with `point` armed: it dies there, and the committed output is untouched."""
    before = files_of(folder)
    result = cli(*args, failpoint=point)
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert files_of(folder) == before


def test_one_writer_at_a_time_and_damaged_files_are_not_up_to_date(tmp_path: Path) -> None:
    out = OutputFolder("step", tmp_path / "step", {"n": 1}, {})
    with out:
        with open(lock_path(tmp_path, "step"), "rb") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a second writer would wait
        out.begin()
        (out.staging / "a.txt").write_text("abc")
        out.finish({"files": 1})
    with out:
        assert out.up_to_date()
    (tmp_path / "step" / "a.txt").write_text("ab")  # truncated behind the record's back
    with out:
        assert not out.up_to_date()


def test_an_annotate_step_in_a_url_work_dir_is_published(tmp_path: Path, rated: Path, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv(storage.CACHE_ENV, str(tmp_path / "cache"))
    url = f"file://{tmp_path / 'store'}"
    cache = storage.mirror_folder(url)
    (cache / "annotate").parent.mkdir(parents=True, exist_ok=True)
    rated.rename(cache / "annotate")
    record = csts_split.split(cache / "annotate")
    assert record["generation"].startswith("gen-")
    assert storage.remote_record(url, "annotate/csts")["fingerprint"] == record["fingerprint"]
    assert storage.remote_problems(url, "annotate/csts", record) == []
    again = csts_split.split(cache / "annotate")
    assert again == {"status": "up-to-date", "folder": f"{url}/annotate/csts"}


@pytest.mark.slow
@pytest.mark.parametrize("point", ["annotate-split:before-swap", "annotate-split:between-renames"])
def test_an_annotate_step_killed_inside_its_commit(rated: Path, point: str) -> None:  # noqa: F811
    csts_split.split(rated)
    first = read_record(rated / "csts")
    if point.endswith("before-swap"):
        killed_inside_the_commit(rated / "csts", point, "annotate", "split", "--out", rated, "--seed", "1")
    else:  # the old output waits beside the folder; the next run puts things right
        assert cli("annotate", "split", "--out", rated, "--seed", "1", failpoint=point).returncode == -signal.SIGKILL
        assert not (rated / "csts").exists() and (rated / ".csts.old" / "_stage.json").is_file()
    result = cli("annotate", "split", "--out", rated, "--seed", "1")
    assert result.returncode == 0, result.stderr
    record = read_record(rated / "csts")
    assert record["fingerprint"] != first["fingerprint"] and record["params"]["seed"] == 1
    assert not (rated / ".csts.next").exists() and not (rated / ".csts.old").exists()


@pytest.mark.slow
def test_the_hf_export_killed_inside_its_commit(tmp_path: Path, rated: Path) -> None:  # noqa: F811
    csts_split.split(rated)
    out = tmp_path / "hf"
    assert cli("export", "--annotate", rated, "--out", out).returncode == 0
    (out / ".git").mkdir()
    (out / ".git" / "HEAD").write_text("ref: main\n")
    csts_split.split(rated, SplitOptions(seed=1, ratios="50:25:25"), force=True)
    args = ("export", "--annotate", rated, "--out", out, "--force", "--name", "other")
    killed_inside_the_commit(out, "export-hf:before-record", *args)
    killed_inside_the_commit(out, "export-hf:before-swap", *args)
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    assert "C-STS pairs from other" in (out / "README.md").read_text()
    assert (out / ".git" / "HEAD").read_text() == "ref: main\n"  # the checkout's own files stay


@pytest.mark.slow
def test_train_killed_inside_its_commit(tmp_path: Path, tiny_bert: Path, csts_files: dict[str, Path]) -> None:  # noqa: F811
    out = tmp_path / "run"
    args = ["train", "--train", csts_files["train"], "--validation", csts_files["validation"], "--out", out]
    args += ["--model", tiny_bert, "--epochs", "1", "--batch-size", "8", "--device", "cpu"]
    assert cli(*args).returncode == 0
    first = read_record(out)
    killed_inside_the_commit(out, "train:before-swap", *args, "--max-steps", "1")
    result = cli(*args, "--max-steps", "1")
    assert result.returncode == 0, result.stderr
    record = read_record(out)
    assert record["fingerprint"] != first["fingerprint"] and record["counts"]["optimizer_steps"] == 1


def test_train_into_a_store_url(tmp_path: Path, tiny_bert: Path, csts_files: dict[str, Path], monkeypatch) -> None:  # noqa: F811
    from typer.testing import CliRunner

    from csts_pipeline.cli import app

    monkeypatch.setenv(storage.CACHE_ENV, str(tmp_path / "cache"))
    url = f"file://{tmp_path / 'store'}"
    args = ["train", "--train", csts_files["train"], "--validation", csts_files["validation"]]
    args += ["--out", f"{url}/run", "--model", tiny_bert, "--max-steps", "1", "--batch-size", "8", "--device", "cpu"]
    first = CliRunner().invoke(app, [str(a) for a in args])
    assert first.exit_code == 0, first.output
    record = storage.remote_record(url, "run")
    assert record["stage"] == "train" and storage.remote_problems(url, "run", record) == []
    assert any(name.startswith("best/") for name in record["output_files"])
    shutil.rmtree(tmp_path / "cache")  # another machine: the store's output is up to date, its record read back
    again = CliRunner().invoke(app, [str(a) for a in args])
    assert again.exit_code == 0 and "up to date" in again.output, again.output
