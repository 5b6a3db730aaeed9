"""annotate: sampling, task files, results validation, rating aggregation and agreement, the split, the CLI.

Kept pairs are built from real COCO val captions in the filter's kept schema; crowd answers come from seeded
simulated workers (noisy raters around a hidden true similarity)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import UserError
from pipeline.shards import shard_name, write_table
from stages import annotate

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
COCO_CAPTIONS = SHARED_DATA / "coco" / "captions_val2017.json"
STOPWORDS = REPO / "pipeline" / "resources" / "nltk_data" / "corpora" / "stopwords" / "english"

KEPT_SCHEMA = pa.schema(
    [
        ("pair_id", pa.int64()),
        ("image_id_1", pa.int64()),
        ("image_id_2", pa.int64()),
        ("caption_id_1", pa.int64()),
        ("caption_id_2", pa.int64()),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("image_cosine", pa.float32()),
        ("iou", pa.float32()),
        ("simcse_cosine", pa.float32()),
        ("ratio", pa.float32()),
        ("length", pa.int32()),
    ]
)
CONDITIONS = ["The type of animal.", "The color of the vehicle.", "The number of people.", "The location."]
CONDITIONS += ["The activity being performed.", "The weather.", "The food on the table.", "The time of day."]


def kept_table(n_images: int = 160, pairs_per_image_pair: int = 3, seed: int = 0) -> pa.Table:
    """Caption pairs of neighbouring COCO val images, in the filter's kept schema, with real bag-of-words IoU."""
    if not COCO_CAPTIONS.is_file():
        pytest.skip(f"shared data not found at {COCO_CAPTIONS}")
    rng = np.random.default_rng(seed)
    annotations = json.loads(COCO_CAPTIONS.read_text())["annotations"]
    by_image: dict[int, list[dict]] = {}
    for annotation in sorted(annotations, key=lambda a: a["id"]):
        by_image.setdefault(annotation["image_id"], []).append(annotation)
    images = sorted(by_image)[:n_images]
    stopwords = set(STOPWORDS.read_text().split())
    rows = []
    for first, second in zip(images[:-1], images[1:]):
        cosine = float(rng.uniform(0.5, 0.95))
        for a, b in zip(by_image[first][:pairs_per_image_pair], by_image[second][:pairs_per_image_pair]):
            s1, s2 = " ".join(a["caption"].split()), " ".join(b["caption"].split())
            w1 = {w.strip(".,").lower() for w in s1.split()} - stopwords
            w2 = {w.strip(".,").lower() for w in s2.split()} - stopwords
            words1, words2 = len(s1.split()), len(s2.split())
            rows.append(
                {
                    "pair_id": (a["id"] << 32) | b["id"],
                    "image_id_1": first,
                    "image_id_2": second,
                    "caption_id_1": a["id"],
                    "caption_id_2": b["id"],
                    "sentence1": s1,
                    "sentence2": s2,
                    "image_cosine": cosine,
                    "iou": len(w1 & w2) / max(1, len(w1 | w2)),
                    "simcse_cosine": None,
                    "ratio": min(words1, words2) / max(words1, words2),
                    "length": min(len(s1), len(s2)),
                }
            )
    return pa.Table.from_pylist(rows, schema=KEPT_SCHEMA)


@pytest.fixture(scope="module")
def kept() -> pa.Table:
    return kept_table()


@pytest.fixture
def kept_dir(tmp_path: Path, kept: pa.Table) -> Path:
    """Two kept shards, as the filter stage writes them."""
    folder = tmp_path / "kept"
    half = kept.num_rows // 2
    write_table(kept.slice(0, half), folder / shard_name(0))
    write_table(kept.slice(half), folder / shard_name(1))
    return folder


def write_results(path: Path, rows: list[dict], mturk: bool = True) -> Path:
    """Crowd results as an MTurk "Batch results" CSV (HIT columns, Input.<var>, Answer.<field>), or as the plain
    CSV/JSONL (by suffix) with unprefixed names."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return path
    header = list(dict.fromkeys(name for row in rows for name in row))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if mturk:
            names = {"worker_id": "WorkerId", "assignment_id": "AssignmentId", "status": "AssignmentStatus"}
            inputs = ("task_id", "item_id", "sentence1", "sentence2", "condition")
            writer.writerow(
                ["HITId", *(names.get(h) or (f"Input.{h}" if h in inputs else f"Answer.{h}") for h in header)]
            )
            writer.writerows([f"HIT{i}", *(row.get(h, "") for h in header)] for i, row in enumerate(rows))
        else:
            writer.writerow(header)
            writer.writerows([row.get(h, "") for h in header] for row in rows)
    return path


def simulated_conditions(tasks: list[dict], seed: int = 1) -> list[dict]:
    """One writer per pair (5 writers), two different conditions from a list."""
    rng = np.random.default_rng(seed)
    rows = []
    for index, task in enumerate(tasks):
        high, low = rng.choice(len(CONDITIONS), size=2, replace=False)
        rows.append(
            {
                "task_id": task["task_id"],
                "sentence1": task["sentence1"],
                "sentence2": task["sentence2"],
                "worker_id": f"W{index % 5}",
                "assignment_id": f"A-c-{index}",
                "status": "Submitted",
                "condition_high": CONDITIONS[high],
                "condition_low": CONDITIONS[low],
            }
        )
    return rows


RATERS = {"R1": 0.4, "R2": 0.5, "R3": 0.6, "R4": 0.5, "R5": 0.7}  # noise sd around the hidden truth


def simulated_ratings(items: list[dict], raters_per_item: int = 3, seed: int = 2) -> tuple[list[dict], dict, set]:
    """Each item rated by `raters_per_item` of five noisy raters and the spammer S (uniform 1-5) on some items.
    The hidden truth is high (3.5-5) for high conditions and low (1-2.5) for low ones; on 10% of the items the
    condition is bad and raters flag it not pertinent with probability 0.9 (0.03 elsewhere).
    Returns the result rows, the truth per item id and the ids of the bad items."""
    rng = np.random.default_rng(seed)
    names = [*RATERS, "S"]
    rows, truth, bad = [], {}, set()
    for item in items:
        value = rng.uniform(3.5, 5.0) if item["condition_type"] == "high" else rng.uniform(1.0, 2.5)
        truth[item["item_id"]] = value
        is_bad = rng.random() < 0.1
        if is_bad:
            bad.add(item["item_id"])
        for worker in rng.choice(names, size=raters_per_item, replace=False):
            flagged = rng.random() < (0.9 if is_bad else 0.03)
            if worker == "S":
                rating = int(rng.integers(1, 6))
            else:
                rating = int(np.clip(np.rint(value + rng.normal(0, RATERS[worker])), 1, 5))
            rows.append(
                {
                    "item_id": item["item_id"],
                    "condition": item["condition"],
                    "worker_id": str(worker),
                    "assignment_id": f"A-r-{len(rows)}",
                    "rating": "" if flagged else rating,
                    "not_pertinent": "true" if flagged else "false",
                }
            )
    return rows, truth, bad


def read_tasks(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "tasks.jsonl").read_text().splitlines()]


def read_report(folder: Path) -> list[tuple[int, str, str]]:
    with (folder / "report.csv").open(newline="") as handle:
        return [(int(r["row"]), r["id"], r["problem"]) for r in csv.DictReader(handle)]


@pytest.fixture
def rated(tmp_path: Path, kept_dir: Path) -> Path:
    """An annotate folder taken through conditions and ratings with simulated workers."""
    folder = tmp_path / "annotate"
    annotate.export_conditions(folder, annotate.kept_source(None, kept_dir), 120, 0, 4, False)
    tasks = read_tasks(folder / "conditions_tasks")
    annotate.import_conditions(folder, [write_results(tmp_path / "c.csv", simulated_conditions(tasks))], False)
    annotate.export_ratings(folder, 0, False)
    rows, _, _ = simulated_ratings(read_tasks(folder / "ratings_tasks"))
    annotate.import_ratings(folder, [write_results(tmp_path / "r.csv", rows)], "mean", 0.5, 1, False)
    return folder


# ------------------------------------------------------------------------------------------ Fleiss' kappa


# Fleiss (1971) as worked on Wikipedia ("Fleiss' kappa", worked example): 10 subjects, 14 raters, 5 categories.
FLEISS_EXAMPLE = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]


def test_fleiss_kappa_matches_the_textbook_example():
    result = annotate.fleiss_kappa(np.array(FLEISS_EXAMPLE))
    assert result.observed == pytest.approx(0.378, abs=5e-4)
    assert result.expected == pytest.approx(0.213, abs=5e-4)
    assert result.kappa == pytest.approx(0.20993, abs=5e-5)


def test_fleiss_kappa_with_varying_rater_counts():
    # item 1: two raters agree (P=1); item 2: three raters 1, 2, 2 (P=(1+4-3)/6=1/3); P-bar=2/3;
    # category shares 3/5 and 2/5, P_e=13/25; kappa=(2/3-13/25)/(12/25)
    result = annotate.fleiss_kappa(np.array([[2, 0], [1, 2]]))
    assert result.kappa == pytest.approx((2 / 3 - 13 / 25) / (12 / 25))
    assert annotate.fleiss_kappa(np.array([[3, 0, 0], [0, 2, 0], [0, 0, 4]])).kappa == pytest.approx(1.0)
    with pytest.raises(ValueError):
        annotate.fleiss_kappa(np.array([[1, 0], [2, 0]]))
