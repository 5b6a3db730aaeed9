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


def test_a_csv_read_as_columns_holds_what_the_row_reader_reads(tmp_path: Path):
    """The ratings screen reads a CSV as columns (crowd/columns.py): the same rows, numbers, fields and posted
    answers as the row reader, with blank and ragged records and an Input./Answer. pair."""
    text = (
        "Input.item_id,Answer.item_id,WorkerId,Answer.rating,Answer.not_pertinent\n"
        "a, a ,W1,4,false\n\n,,,,\n b  c ,,W2\n,,W3,5,true,extra\n\u3000,,,,\n"
    )
    path = tmp_path / "batch.csv"
    path.write_text(text, encoding="utf-8")
    rows, _, names = mturk.PLATFORM.read_results(path, ("item_id",))
    found, _, column_names = mturk.PLATFORM.read_columns(path, ("item_id",))
    assert column_names == names and found.row.tolist() == [r.row for r in rows]
    for name in names:
        assert [v or None for v in found.column(name).tolist()] == [r.fields.get(name) or None for r in rows]
    assert found.column("item_id", posted=True).tolist() == [r.posted.get("item_id") for r in rows]
