"""`csts-pipeline export --format hf`: the folder loads as `datasets.load_dataset(DIR)` would (checked here with
plain pyarrow and the card's YAML, since `datasets` is not a dependency), and its card holds the statistics."""

from __future__ import annotations

import glob
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

from csts_pipeline.pipeline.records import write_json
from csts_pipeline.stages.annotate.steps import csts_split
from tests.annotate.test_annotate import cli, cli_error, kept, kept_dir, rated  # noqa: F401
from tests.conftest import reseal

FUNNEL = {
    "candidates": 1000,
    "kept": 360,
    "rejected": 640,
    "order": ["length", "ratio", "iou", "simcse_cosine"],
    "criteria": {
        "length": {"rule": "shorter >= 50 chars", "rejected_alone": 300, "rejected_in_order": 300},
        "ratio": {"rule": "words ratio >= 0.7", "rejected_alone": 200, "rejected_in_order": 140},
        "iou": {"rule": "iou <= 0.12", "rejected_alone": 250, "rejected_in_order": 200},
        "simcse_cosine": {"rule": "off", "rejected_alone": None, "rejected_in_order": None},
    },
}


@pytest.fixture
def work(tmp_path: Path, rated: Path) -> Path:  # noqa: F811
    """A work folder as a manifest names it: a filter record with its funnel, and the annotate folder split."""
    work = tmp_path / "work"
    shutil.copytree(rated, work / "annotate")
    csts_split.split(work / "annotate")
    write_json(work / "filter" / "_stage.json", {"stage": "filter", "status": "done", "funnel": FUNNEL})
    reseal(work / "filter")
    (tmp_path / "pub.yaml").write_text(
        f"name: pub\nwork_dir: {work}\ndata: {{format: coco, captions: {tmp_path}/c.json, images: {tmp_path}}}\n"
    )
    return work


def card_of(folder: Path) -> tuple[dict, str]:
    """The card's YAML header and its Markdown body."""
    text = (folder / "README.md").read_text()
    match = re.fullmatch(r"---\n(.*?)\n---\n(.*)", text, flags=re.S)
    assert match, text[:200]
    return yaml.safe_load(match.group(1)), match.group(2)


def load_like_datasets(folder: Path) -> dict[str, pa.Table]:
    """What `datasets.load_dataset(folder)` does with a card's `configs`: each split's `path` globs, relative to
    the folder, read as Parquet and concatenated."""
    header, _ = card_of(folder)
    (config,) = header["configs"]
    assert config["config_name"] == "default"
    splits = {}
    for entry in config["data_files"]:
        files = sorted(glob.glob(str(folder / entry["path"])))
        assert files, entry
        splits[entry["split"]] = pa.concat_tables(pq.read_table(f) for f in files)
    return splits


def test_export_round_trip_with_card_and_plot(tmp_path: Path, work: Path):
    out = tmp_path / "hf"
    output = cli("export", "-m", tmp_path / "pub.yaml", "--format", "hf", "--out", out, "--license", "cc-by-4.0")
    assert output.splitlines()[0].startswith(f"{out}: train ")
    csts = work / "annotate" / "csts"
    loaded = load_like_datasets(out)
    assert list(loaded) == ["train", "validation", "test"]
    for split, table in loaded.items():
        assert table.equals(pq.read_table(csts / f"{split}.parquet"))
        assert table.schema.metadata[b"csts.label_range"] == b"1 5"
    assert sorted(p.name for p in (out / "data").iterdir()) == [
        f"{s}-00000-of-00001.parquet" for s in ("test", "train", "validation")
    ]

    header, body = card_of(out)
    assert header["license"] == "cc-by-4.0" and header["task_categories"] == ["sentence-similarity"]
    assert header["pretty_name"] == "C-STS pairs from pub"
    splits = {s["name"]: s["num_examples"] for s in header["dataset_info"]["splits"]}
    assert splits == {split: table.num_rows for split, table in loaded.items()}
    features = {f["name"]: f["dtype"] for f in header["dataset_info"]["features"]}
    assert features["label"] == "float64" and features["sentence1"] == "string" and features["pair_id"] == "int64"

    # the statistics, recomputed here
    rows = pa.concat_tables(loaded.values()).to_pylist()
    sentence = np.mean([len(r[k].split()) for r in rows for k in ("sentence1", "sentence2")])
    condition = np.mean([len(r["condition"].split()) for r in rows])
    assert f"sentences {sentence:.1f} (both sentences of every instance), conditions {condition:.1f}" in body
    for split, table in loaded.items():
        pairs = len(set(table.column("pair_id").to_pylist()))
        assert f"| {split} | {table.num_rows:,} | {pairs:,} |" in body
    # the histogram: linked in the card, a real PNG, and its table adds up to the instances
    assert "![Label histogram per split](label_histogram.png)" in body
    with Image.open(out / "label_histogram.png") as image:
        assert image.format == "PNG" and image.size[0] > 300
    table_rows = re.findall(r"^\| (\d[\d.-]*) \| (\d+) \| (\d+) \| (\d+) \|$", body, flags=re.M)
    assert sum(int(r[1]) for r in table_rows) == loaded["train"].num_rows
    # agreement from the rating import, and the filter funnel in order
    assert re.search(r"\| every kept item with 2\+ ratings \| \d+ \| 0\.\d{3} \| 0\.\d{3} \| 0\.\d{3} \|", body)
    assert "| length | shorter >= 50 chars | 300 | 700 |" in body
    assert "| iou | iou <= 0.12 | 200 | 360 |" in body and "| simcse_cosine | off | - | 360 |" in body

    # the same inputs give the same files
    again = tmp_path / "again"
    cli("export", "-m", tmp_path / "pub.yaml", "--out", again, "--license", "cc-by-4.0")
    for path in out.rglob("*"):
        if path.is_file() and path.name != "_stage.json":  # the commit record holds the run's times
            assert path.read_bytes() == (again / path.relative_to(out)).read_bytes(), path


def test_export_refusals_and_the_annotate_folder_alone(tmp_path: Path, work: Path):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    manifest = tmp_path / "pub.yaml"
    assert "folder is not empty" in cli_error("export", "-m", manifest, "--out", out)
    cli("export", "-m", manifest, "--out", out, "--force")
    assert (out / "notes.txt").read_text() == "mine" and (out / "README.md").is_file()
    assert "--format 'csv'" in cli_error("export", "-m", manifest, "--out", tmp_path / "x", "--format", "csv")
    assert "--annotate DIR" in cli_error("export", "--out", tmp_path / "x")
    assert "no finished annotate split output" in cli_error(
        "export", "--annotate", tmp_path / "nothing", "--out", tmp_path / "x"
    )
    # without a manifest: no funnel, said so in the card
    cli("export", "--annotate", work / "annotate", "--out", tmp_path / "alone", "--name", "mine")
    header, body = card_of(tmp_path / "alone")
    assert header["pretty_name"] == "C-STS pairs from mine" and header["license"] == "other"
    assert "Filter funnel" not in body and "the filter funnel is not included" in body
    # a manifest whose run has no filter record (the kept pairs came from --input): no funnel, said so
    shutil.rmtree(work / "filter")
    cli("export", "-m", manifest, "--out", tmp_path / "nofilter")
    _, body = card_of(tmp_path / "nofilter")
    assert "Filter funnel" not in body and f"no filter record with a funnel in {work / 'filter'}" in body
