"""`csts-pipeline export --format hf`: the split C-STS files as a Hugging Face dataset folder, the form in which a
dataset is published.

The folder follows the Hub's conventions, so `datasets.load_dataset(DIR)` loads it: one Parquet file per split
under `data/` (`data/train-00000-of-00001.parquet`), and a dataset card, `README.md`, whose YAML header names the
licence, the task, the splits and their sizes, and maps the splits to the files (`configs:`). The card's body
holds the statistics a C-STS paper reports (instances per split, a label histogram, average sentence and
condition lengths, agreement, the filter funnel), computed from the files it publishes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import RECORD, read_json, read_record, require_current, require_record
from csts_pipeline.pipeline.shards import read_table, write_atomic, write_table
from csts_pipeline.stages.annotate.layout import (
    AGREEMENT,
    BWS,
    BWS_TASKS,
    CSTS,
    RATINGS,
    RELIABILITY,
    SPLITS,
    require_current_ratings,
)
from csts_pipeline.stages.annotate.release import licenses, soft_labels
from csts_pipeline.stages.annotate.release.card import Histogram, Release, render_card
from csts_pipeline.stages.annotate.steps import model_folders

FORMATS = ("hf",)
STAGE = "export-hf"
# the work folder's own folders: a stage's output, or where one will be written
WORK_FOLDERS = ("embed", "mine", "filter", "text_embeddings", "annotate", "train", "report")
CARD = "README.md"
HISTOGRAM = "label_histogram.png"
DATA = "data"


def shard_path(split: str) -> str:
    """The Hub's file naming for a split held in one Parquet file."""
    return f"{DATA}/{split}-00000-of-00001.parquet"


def export_hf(
    annotate_dir: Path, work_dir: Path | None, out: Path, *, name: str, license: str, force: bool = False
) -> dict:
    """Write the dataset folder `out` from `<annotate_dir>/csts/` (and the filter record under `work_dir`),
    committed whole (pipeline.commit): a failed export leaves the previous one, and whatever else the folder holds
    (a checkout's `.git`, notes) stays."""
    license = licenses.hub_license(license)
    check_target(out, annotate_dir, work_dir)
    release = gather(annotate_dir, work_dir, name, license)
    _prepare(out, force)
    params = {"format": "hf", "name": name, "license": license}
    sources = {"likert": annotate_dir / RATINGS, "bws": annotate_dir / BWS}
    inputs = {"csts": require_current(annotate_dir / CSTS, "annotate split", sources)["fingerprint"]}
    with OutputFolder(STAGE, out, params, inputs, reads=(annotate_dir / CSTS,), keep_others=True) as output:
        output.begin(force=True)
        for split, table in release.tables.items():
            write_table(table, output.staging / shard_path(split))
        _write_soft_labels(annotate_dir, release, output.staging)
        histogram = label_histogram(release.tables)
        save_histogram(histogram, output.staging / HISTOGRAM)
        files = {split: shard_path(split) for split in release.tables}
        card = render_card(release, statistics(release.tables), histogram, HISTOGRAM, files)
        write_atomic(output.staging / CARD, lambda handle: handle.write(card.encode()))
        rows = {split: table.num_rows for split, table in release.tables.items()}
        output.finish({"rows": sum(rows.values())}, rows=rows)
    return {"out": str(out), "rows": rows, "card": str(out / CARD), "histogram": str(out / HISTOGRAM)}


def _write_soft_labels(annotate_dir: Path, release: Release, staging: Path) -> None:
    """`annotations/` in the export's staging folder: the individual ratings (pseudonymous workers) and model
    distributions of the published items; nothing when the labels are not ratings."""
    found = soft_labels.soft_label_tables(annotate_dir, release.tables) if release.labels["source"] == "likert" else {}
    for name, table in found.items():
        write_table(table, staging / soft_labels.ANNOTATIONS / name)
    release.soft_labels = {f"{soft_labels.ANNOTATIONS}/{name}": table.num_rows for name, table in found.items()}


def gather(annotate_dir: Path, work_dir: Path | None, name: str, license: str) -> Release:
    """The split files and the records the card quotes; a missing split step is an error telling what to run."""
    csts_dir = annotate_dir / CSTS
    record = require_record(csts_dir, "annotate split")
    tables = {split: read_table(csts_dir / f"{split}.parquet") for split in SPLITS}
    labels = record.get("labels") or {"source": "likert", "scale": [1, 5], "description": "1-5 Likert ratings"}
    release = Release(name, license, tables, labels)
    if labels["source"] == "bws":
        release.agreement = _optional_json(annotate_dir / BWS / RELIABILITY, release)
        design = require_record(annotate_dir / BWS_TASKS, "annotate export --stage bws")
        release.design = design.get("design")
    else:
        if read_record(annotate_dir / RATINGS) is not None:  # stale when a new `annotate rate` replaced its model rows
            current = require_current_ratings(annotate_dir)
            model_folders.require_learnt_current(annotate_dir, current)  # a crossfit on other people's answers
        release.agreement = _optional_json(annotate_dir / RATINGS / AGREEMENT, release)
    filter_record = None if work_dir is None else read_record(work_dir / "filter")
    if work_dir is None:
        release.notes.append("no manifest given: the filter funnel is not included")
    elif filter_record is None or "funnel" not in filter_record:
        release.notes.append(f"no filter record with a funnel in {work_dir / 'filter'}: the funnel is not included")
    else:
        release.funnel = filter_record["funnel"]
    return release


def _optional_json(path: Path, release: Release) -> dict[str, Any] | None:
    if not path.is_file():
        release.notes.append(f"{path.name} not found: no agreement figures")
        return None
    return read_json(path)


def check_target(out: Path, annotate_dir: Path, work_dir: Path | None) -> None:
    """The export writes only a folder of its own: not the annotate folder or the work folder's stage folders
    (nor anything inside or above them), and not a folder inside one holding another step's record, which it
    would replace (and whose lock the export may hold already, reading `csts/`)."""
    target = out.resolve()
    owned = [annotate_dir.resolve()]
    if work_dir is not None:
        owned += [(work_dir / name).resolve() for name in WORK_FOLDERS]
    for folder in owned:
        if target == folder or folder in target.parents or target in folder.parents:
            raise UserError(f"{out}: inside or above {folder}, a pipeline folder; export to a folder of its own")
    for folder in (target, *target.parents):
        record = folder / RECORD
        if record.is_file() and _stage_of(record) != STAGE:
            raise UserError(f"{out}: {record} belongs to another step; export to a folder of its own")


def _stage_of(path: Path) -> str | None:
    """The step named in a stage record; None when it cannot be read as one."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record.get("stage") if isinstance(record, dict) else None


def _prepare(out: Path, force: bool) -> None:
    """An existing non-empty folder is replaced only with --force: it may be a checkout of a published dataset."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{out}: folder is not empty; --force replaces its card, plot and data/ files")


# ------------------------------------------------------------------------------------------------ statistics


def word_counts(column: pa.ChunkedArray) -> np.ndarray:
    """Words per value: runs of non-space characters."""
    return pc.list_value_length(pc.utf8_split_whitespace(column)).to_numpy(zero_copy_only=False)


def statistics(tables: dict[str, pa.Table]) -> dict[str, Any]:
    """Instances and sentence pairs per split, and average lengths in words over every instance: a sentence's
    over both sentences of each row, a condition's over each row's condition."""
    rows = pa.concat_tables(tables.values())
    sentences = np.concatenate([word_counts(rows.column("sentence1")), word_counts(rows.column("sentence2"))])
    conditions = word_counts(rows.column("condition"))
    return {
        "instances": {split: table.num_rows for split, table in tables.items()},
        "pairs": {split: len(np.unique(table.column("pair_id").to_numpy())) for split, table in tables.items()},
        "sentence_words": float(sentences.mean()) if len(sentences) else None,
        "condition_words": float(conditions.mean()) if len(conditions) else None,
        "total": rows.num_rows,
    }


def label_histogram(tables: dict[str, pa.Table], low: float = 1.0, high: float = 5.0) -> Histogram:
    values = {split: table.column("label").drop_null().to_numpy() for split, table in tables.items()}
    pooled = np.concatenate(list(values.values()))
    if len(pooled) and np.all(pooled == np.round(pooled)):
        edges = np.arange(low - 0.5, high + 1.0)
        names = [f"{v:g}" for v in np.arange(low, high + 1)]
    else:
        edges = np.arange(low, high + 0.5, 0.5)
        names = [f"{a:g}-{b:g}" for a, b in itertools.pairwise(edges)]
    counts = {split: np.histogram(v, edges)[0] for split, v in values.items()}
    return Histogram(edges, names, counts)


def save_histogram(histogram: Histogram, path: Path) -> None:
    """Grouped bars, one colour per split; the PNG carries no timestamp, so the same data give the same file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(figsize=(7, 3.5), dpi=100)
    positions = np.arange(len(histogram.labels))
    width = 0.8 / max(len(histogram.counts), 1)
    for offset, (split, counts) in enumerate(histogram.counts.items()):
        axes.bar(positions + (offset - (len(histogram.counts) - 1) / 2) * width, counts, width, label=split)
    axes.set_xticks(positions, histogram.labels)
    axes.set_xlabel("label (1 = dissimilar, 5 = similar under the condition)")
    axes.set_ylabel("instances")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.legend()
    figure.tight_layout()
    write_atomic(path, lambda handle: figure.savefig(handle, format="png", metadata={"Software": None}))
    plt.close(figure)
