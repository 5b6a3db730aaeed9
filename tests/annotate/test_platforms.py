"""The crowd platforms behind one interface (crowd/platform.py): found by their modules, each results file read by
the platform that says it is its own, and a name, a stage or a file none takes refused in one line."""

from pathlib import Path

import pytest

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.crowd import label_studio, mturk
from csts_pipeline.stages.annotate.crowd.platform import platform, platforms, reader_of
from csts_pipeline.stages.annotate.crowd.screening import read_results


def test_every_platform_module_is_found_mturk_first():
    assert list(platforms()) == ["mturk", "label-studio"]
    assert platforms()["mturk"] is mturk.PLATFORM and platforms()["label-studio"] is label_studio.PLATFORM


def test_each_results_file_goes_to_its_platform(tmp_path: Path):
    assert reader_of(tmp_path / "batch.csv") is mturk.PLATFORM
    assert reader_of(tmp_path / "batch.jsonl") is mturk.PLATFORM
    assert reader_of(tmp_path / "project-1.json") is label_studio.PLATFORM
    (tmp_path / "notes.txt").write_text("item_id,worker_id,rating\nx,w,3\n")
    with pytest.raises(UserError) as caught:
        read_results(tmp_path / "notes.txt", ("item_id", "worker_id", "rating"))
    line = str(caught.value)
    assert line.startswith(f"{tmp_path / 'notes.txt'}: not a results file of any crowd platform (mturk: ")
    assert "label-studio: a Label Studio JSON export (.json)" in line and "\n" not in line


def test_a_name_or_a_stage_no_platform_takes_is_one_line():
    with pytest.raises(UserError, match=r"^--platform 'prolific': expected mturk or label-studio$"):
        platform("prolific")
    assert platform("label-studio", "bws") is label_studio.PLATFORM
    assert not label_studio.PLATFORM.supports("no-such-stage")
    with pytest.raises(UserError, match=r"^--platform label-studio: no label-studio tasks for --stage no-such-stage$"):
        platform("label-studio", "no-such-stage")


def test_label_studio_grants_and_blocks_nothing_mturk_writes_its_files(tmp_path: Path):
    assert label_studio.PLATFORM.grant(tmp_path, [("w1", True)], "C-STS") == {}
    assert mturk.PLATFORM.grant(tmp_path, [("w1", True), ("w2", False)], "C-STS") == {"grant": mturk.GRANT}
    assert (tmp_path / mturk.GRANT).read_text().splitlines() == ['"Worker ID","UPDATE-C-STS"', '"w1",1', '"w2",0']
    assert mturk.PLATFORM.block(tmp_path, [("w2", "3 of 4 wrong")]) == {"blocklist": mturk.BLOCKLIST}
    assert (tmp_path / mturk.BLOCKLIST).read_text().splitlines()[1:] == ['"w2","3 of 4 wrong"']
