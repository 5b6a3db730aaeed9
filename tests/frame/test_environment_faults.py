"""Environment faults are user errors too (issue 38, item 8): a full disk, a read-only folder or a lock that cannot be
made gives one line naming the path and the cause, exit code 2, and the previous output byte for byte; an up-to-date
step on a read-only folder says "up to date" without the lock it does not need.

The faults are injected where the OS would raise them (CSTS_PIPELINE_FAULT, pipeline/failpoints.py): the tests run
as root in CI, where chmod does not stop a write, and a tmpfs or read-only mount needs privileges a CI runner lacks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.failpoints import FAULT
from tests.annotate.test_annotate import kept, kept_dir, rated  # noqa: F401
from tests.cli.test_bad_inputs import cli_error, coco_manifest, small  # noqa: F401

runner = CliRunner()


def files_of(folder: Path) -> dict[Path, bytes]:
    """Every file under `folder` with its bytes: what "untouched" compares."""
    return {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_a_full_disk_during_embed_is_one_line_and_keeps_the_output(
    tmp_path: Path,
    small: tuple[dict, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manifest = coco_manifest(tmp_path, small)
    assert runner.invoke(app, ["embed", "--manifest", str(manifest)]).exit_code == 0
    embed = tmp_path / "work" / "embed"
    before = files_of(embed)
    monkeypatch.setenv(FAULT, "write:ENOSPC:embeddings")
    shard = tmp_path / "work" / ".embed.next" / "embeddings" / "part-00000.parquet"
    assert cli_error("embed", "--manifest", str(manifest), "--force") == (
        f"error: {shard}: No space left on device (ENOSPC); free some space and rerun (the previous output is kept)"
    )
    assert files_of(embed) == before


def test_a_read_only_work_folder_up_to_date_split_says_so_and_a_forced_one_is_one_line(
    rated: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert runner.invoke(app, ["annotate", "split", "--out", str(rated)]).exit_code == 0
    csts = rated / "csts"
    before = files_of(rated)
    monkeypatch.setenv(FAULT, "lock:EROFS")  # every lock file: the whole work folder is read-only
    result = runner.invoke(app, ["annotate", "split", "--out", str(rated)])
    assert result.exit_code == 0 and result.output.strip() == f"up to date: {csts} (nothing to do; --force recomputes)"
    assert cli_error("annotate", "split", "--out", str(rated), "--force") == (
        f"error: {rated / '.csts.lock'}: Read-only file system (EROFS); give a folder that can be written (--out, or "
        "work_dir in the manifest) (the previous output is kept)"
    )
    assert files_of(rated) == before


def test_a_lock_that_cannot_be_made_for_a_stage_fails_before_any_work(
    tmp_path: Path,
    small: tuple[dict, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manifest = coco_manifest(tmp_path, small)
    assert runner.invoke(app, ["embed", "--manifest", str(manifest)]).exit_code == 0
    before = files_of(tmp_path / "work")
    monkeypatch.setenv(FAULT, "lock:EACCES:.embed.lock")
    result = runner.invoke(app, ["embed", "--manifest", str(manifest)])
    assert result.exit_code == 0 and f"up to date: {tmp_path / 'work' / 'embed'}" in result.output
    assert cli_error("embed", "--manifest", str(manifest), "--force") == (
        f"error: {tmp_path / 'work' / '.embed.lock'}: Permission denied (EACCES); give a folder that can be written "
        "(--out, or work_dir in the manifest), or fix its permissions (the previous output is kept)"
    )
    assert files_of(tmp_path / "work") == before
    assert not (tmp_path / "work" / ".embed.next").exists()


def test_a_full_disk_during_an_import_is_one_line_and_keeps_the_labels(
    tmp_path: Path,
    rated: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's case: `annotate import` on a full disk (every command goes through one handler)."""
    before = files_of(rated)
    monkeypatch.setenv(FAULT, "write:ENOSPC:.ratings.next")
    args = ["annotate", "import", "--stage", "ratings", "--out", str(rated), "--results", str(tmp_path / "r.csv")]
    line = cli_error(*args, "--force")
    assert line.startswith(f"error: {rated / '.ratings.next'}/") and line.endswith(
        ": No space left on device (ENOSPC); free some space and rerun (the previous output is kept)"
    )
    assert {path: data for path, data in files_of(rated).items() if ".ratings.next" not in str(path)} == before


def test_an_upstream_lock_another_user_owns_does_not_stop_a_stage(
    tmp_path: Path,
    small: tuple[dict, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shared lock of a folder only read cannot be made (`.embed.lock` of another user, mode 0644: EACCES): the
    stage reads it unlocked and commits its own output, under its own lock."""
    manifest = coco_manifest(tmp_path, small)
    assert runner.invoke(app, ["embed", "--manifest", str(manifest)]).exit_code == 0
    monkeypatch.setenv(FAULT, "lock:EACCES:.embed.lock")
    result = runner.invoke(app, ["mine", "--manifest", str(manifest)])
    assert result.exit_code == 0 and "mine: done in " in result.output, result.output
    assert (tmp_path / "work" / "mine" / "_stage.json").is_file()
