"""annotate: sampling, task files, results validation, rating aggregation and agreement, the split, the CLI.

Kept pairs are built from real COCO val captions in the filter's kept schema; crowd answers come from seeded
simulated workers (noisy raters around a hidden true similarity)."""

from __future__ import annotations

import csv
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import write_json
from csts_pipeline.pipeline.schemas import CSTS_SCHEMA, KEPT_SCHEMA
from csts_pipeline.pipeline.shards import shard_name, write_atomic, write_table
from csts_pipeline.stages.annotate.crowd.kept import kept_source
from csts_pipeline.stages.annotate.labels.agreement import fleiss_kappa
from csts_pipeline.stages.annotate.labels.sampling import allocate, quantile_bins, stratified_sample
from csts_pipeline.stages.annotate.labels.splits import parse_ratios, sentence_pair_groups, split_sizes
from csts_pipeline.stages.annotate.layout import SPLITS
from csts_pipeline.stages.annotate.steps import csts_split
from csts_pipeline.stages.annotate.steps.conditions import export_conditions, import_conditions
from csts_pipeline.stages.annotate.steps.options import ConditionsExportOptions, RatingsImportOptions, SplitOptions
from csts_pipeline.stages.annotate.steps.ratings import export_ratings, import_ratings
from tests.conftest import reseal

REPO = Path(__file__).resolve().parents[2]
COCO_CAPTIONS = REPO / "tests" / "data" / "coco" / "captions_val2017_sample.json"
STOPWORDS = (
    REPO / "csts_pipeline" / "stages" / "filter" / "resources" / "nltk_data" / "corpora" / "stopwords" / "english"
)

CONDITIONS = ["The type of animal.", "The color of the vehicle.", "The number of people.", "The location."]
CONDITIONS += ["The activity being performed.", "The weather.", "The food on the table.", "The time of day."]


def kept_table(n_images: int = 160, pairs_per_image_pair: int = 3, seed: int = 0) -> pa.Table:
    """Caption pairs of neighbouring COCO val images, in the filter's kept schema, with real bag-of-words IoU."""
    rng = np.random.default_rng(seed)
    annotations = json.loads(COCO_CAPTIONS.read_text())["annotations"]
    by_image: dict[int, list[dict]] = {}
    for annotation in sorted(annotations, key=lambda a: a["id"]):
        by_image.setdefault(annotation["image_id"], []).append(annotation)
    images = sorted(by_image)[:n_images]
    stopwords = set(STOPWORDS.read_text().split())
    rows = []
    for first, second in itertools.pairwise(images):
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


def simulated_ratings(items: list[dict], ratings_per_item: int = 3, seed: int = 2) -> tuple[list[dict], dict, set]:
    """Each item rated by `ratings_per_item` of five noisy raters and the spammer S (uniform 1-5) on some items.
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
        for worker in rng.choice(names, size=ratings_per_item, replace=False):
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
    export_conditions(folder, kept_source(None, kept_dir), ConditionsExportOptions(n=120))
    tasks = read_tasks(folder / "conditions_tasks")
    import_conditions(folder, [write_results(tmp_path / "c.csv", simulated_conditions(tasks))])
    export_ratings(folder)
    rows, _, _ = simulated_ratings(read_tasks(folder / "ratings_tasks"))
    import_ratings(folder, [write_results(tmp_path / "r.csv", rows)])
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
    result = fleiss_kappa(np.array(FLEISS_EXAMPLE))
    assert result.observed == pytest.approx(0.378, abs=5e-4)
    assert result.expected == pytest.approx(0.213, abs=5e-4)
    assert result.kappa == pytest.approx(0.20993, abs=5e-5)


def test_fleiss_kappa_with_varying_rater_counts():
    # item 1: two raters agree (P=1); item 2: three raters 1, 2, 2 (P=(1+4-3)/6=1/3); P-bar=2/3;
    # category shares 3/5 and 2/5, P_e=13/25; kappa=(2/3-13/25)/(12/25)
    result = fleiss_kappa(np.array([[2, 0], [1, 2]]))
    assert result.kappa == pytest.approx((2 / 3 - 13 / 25) / (12 / 25))
    assert fleiss_kappa(np.array([[3, 0, 0], [0, 2, 0], [0, 0, 4]])).kappa == pytest.approx(1.0)
    with pytest.raises(ValueError):
        fleiss_kappa(np.array([[1, 0], [2, 0]]))


# ------------------------------------------------------------------------------------- stratified sampling


def test_allocate_spreads_n_evenly_over_non_empty_strata():
    assert allocate(np.array([0, 1, 10, 10]), 9).tolist() == [0, 1, 4, 4]
    assert allocate(np.array([5, 5, 5]), 7).tolist() == [2, 2, 3]
    assert allocate(np.array([2, 3]), 100).tolist() == [2, 3]


def test_quantile_bins_keep_ties_together():
    values = np.array([0.0] * 6 + [0.02, 0.04, 0.06, 0.08])
    bins, _ = quantile_bins(values, 4)
    assert len(set(bins[:6].tolist())) == 1
    assert set(bins[6:].tolist()).isdisjoint(bins[:6].tolist())
    assert len(set(bins.tolist())) >= 3


def test_stratified_sample_covers_every_stratum_and_is_seeded():
    rng = np.random.default_rng(0)
    n_rows = 5000
    pair_ids = rng.choice(1 << 40, size=n_rows, replace=False)
    cosine = rng.beta(5, 2, size=n_rows)
    iou = np.where(rng.random(n_rows) < 0.3, 0.0, rng.uniform(0, 0.12, size=n_rows))
    sample = stratified_sample(pair_ids, cosine, iou, n=160, seed=7, bins=4)
    assert len(sample.rows) == len(np.unique(sample.rows)) == 160
    non_empty = np.flatnonzero(sample.sizes)
    assert len(non_empty) >= 12
    per_stratum = np.bincount(sample.strata[sample.rows], minlength=16)
    assert per_stratum.tolist() == sample.quota.tolist()
    assert per_stratum[non_empty].min() >= 160 // len(non_empty)  # every non-empty stratum gets its share
    # the sample spans the range of both axes, unlike the bulk of a beta(5, 2) cosine
    assert cosine[sample.rows].min() < np.quantile(cosine, 0.1) and cosine[sample.rows].max() > np.quantile(cosine, 0.9)
    again = stratified_sample(pair_ids, cosine, iou, n=160, seed=7, bins=4)
    assert again.rows.tolist() == sample.rows.tolist()
    other = stratified_sample(pair_ids, cosine, iou, n=160, seed=8, bins=4)
    assert set(other.rows.tolist()) != set(sample.rows.tolist())
    # the same pairs whatever the row order: keys come from pair ids, not positions
    shuffle = rng.permutation(n_rows)
    moved = stratified_sample(pair_ids[shuffle], cosine[shuffle], iou[shuffle], n=160, seed=7, bins=4)
    assert set(pair_ids[shuffle][moved.rows].tolist()) == set(pair_ids[sample.rows].tolist())


# ------------------------------------------------------------------------------- export / import conditions


def test_export_conditions_writes_stable_task_files(tmp_path: Path, kept_dir: Path, kept: pa.Table):
    folder = tmp_path / "annotate"
    source = kept_source(None, kept_dir)
    record = export_conditions(folder, source, ConditionsExportOptions(n=48))
    assert record["counts"]["tasks"] == 48
    assert sum(s["sampled"] for s in record["strata"].values()) == 48
    tasks = read_tasks(folder / "conditions_tasks")
    with (folder / "conditions_tasks" / "hits.csv").open(newline="") as handle:
        hits = list(csv.DictReader(handle))
    assert [h["task_id"] for h in hits] == [t["task_id"] for t in tasks]
    assert list(hits[0]) == ["task_id", "sentence1", "sentence2"]
    by_pair = {row["pair_id"]: row for row in kept.to_pylist()}
    for task in tasks:
        assert task["task_id"] == f"c-{task['pair_id']:016x}"
        source_row = by_pair[task["pair_id"]]
        assert (task["sentence1"], task["sentence2"]) == (source_row["sentence1"], source_row["sentence2"])
        assert task["caption_id_1"] == source_row["caption_id_1"]
    # a rerun is a no-op; a different sample over tasks already out needs --force; the same ids come back
    assert export_conditions(folder, source, ConditionsExportOptions(n=48))["status"] == "up-to-date"
    with pytest.raises(UserError, match="--force"):
        export_conditions(folder, source, ConditionsExportOptions(n=30))
    export_conditions(folder, source, ConditionsExportOptions(n=30), force=True)
    assert len(read_tasks(folder / "conditions_tasks")) == 30
    export_conditions(folder, source, ConditionsExportOptions(n=48), force=True)
    assert read_tasks(folder / "conditions_tasks") == tasks


def test_export_conditions_reads_a_csv_and_rejects_missing_columns(tmp_path: Path, kept: pa.Table):
    import pyarrow.csv as pacsv

    path = tmp_path / "kept.csv"
    pacsv.write_csv(kept, path)
    record = export_conditions(tmp_path / "a", kept_source(None, path), ConditionsExportOptions(n=10))
    assert record["counts"]["tasks"] == 10
    pq.write_table(kept.drop_columns(["iou"]), tmp_path / "no_iou.parquet")
    with pytest.raises(UserError, match=r"no_iou.parquet: missing column\(s\) iou"):
        export_conditions(tmp_path / "b", kept_source(None, tmp_path / "no_iou.parquet"), ConditionsExportOptions(n=9))


def test_import_conditions_reports_every_problem(tmp_path: Path, kept_dir: Path):
    folder = tmp_path / "annotate"
    export_conditions(folder, kept_source(None, kept_dir), ConditionsExportOptions(n=12))
    tasks = read_tasks(folder / "conditions_tasks")
    rows = simulated_conditions(tasks)
    rows[1]["condition_low"] = "   "  # row 3 of the CSV
    rows[2]["task_id"] = "c-ffffffffffffffff"  # row 4
    rows[3]["condition_high"] = rows[3]["condition_low"].upper()  # row 5: same text
    rows[4]["status"] = "Rejected"  # row 6
    rows[5]["task_id"] = ""  # row 7
    rows.append(dict(rows[0], assignment_id="A-extra", condition_high="The size of the dog."))  # row 14: again
    rows.append(dict(rows[6]))  # row 15: the same assignment twice
    path = write_results(tmp_path / "batch.csv", rows)
    record = import_conditions(folder, [path])
    report = read_report(folder / "conditions")
    assert sorted((row, problem) for row, _, problem in report) == [
        (3, "empty_condition_low"),
        (4, "unknown_id"),
        (5, "same_conditions"),
        (6, "rejected_assignment"),
        (7, "missing_id"),
        (14, "duplicate_task"),
        (15, "duplicate_assignment"),
    ]
    assert record["counts"]["accepted"] == 12 - 5
    assert record["counts"]["unanswered_tasks"] == 5
    triplets = pq.read_table(folder / "conditions" / "conditions.parquet").to_pylist()
    assert len(triplets) == 2 * 7
    assert [t["condition_type"] for t in triplets] == ["high", "low"] * 7
    first = next(t for t in triplets if t["task_id"] == tasks[0]["task_id"])
    assert first["condition"] == rows[0]["condition_high"]  # the first answer wins, the duplicate is reported
    assert first["item_id"] == f"r-{tasks[0]['pair_id']:016x}-high"
    assert first["worker_id"] == "W0"


def test_import_conditions_plain_jsonl_and_bad_files(tmp_path: Path, kept_dir: Path):
    folder = tmp_path / "annotate"
    export_conditions(folder, kept_source(None, kept_dir), ConditionsExportOptions(n=6))
    tasks = read_tasks(folder / "conditions_tasks")
    rows = [{k: r[k] for k in ("task_id", "condition_high", "condition_low")} for r in simulated_conditions(tasks)]
    path = write_results(tmp_path / "answers.jsonl", rows)
    with path.open("a") as handle:
        handle.write("{not json\n")
    record = import_conditions(folder, [path])
    assert record["counts"]["accepted"] == 6
    assert read_report(folder / "conditions") == [(7, "", "bad_json")]
    assert import_conditions(folder, [path])["status"] == "up-to-date"

    wrong = write_results(tmp_path / "wrong.csv", [{"task_id": "x", "condition": "c"}], mturk=False)
    with pytest.raises(UserError, match=r"wrong.csv: missing field\(s\) condition_high, condition_low"):
        import_conditions(folder, [wrong])
    empty = write_results(tmp_path / "empty.csv", [dict(rows[0], condition_high="")], mturk=False)
    with pytest.raises(UserError, match=r"empty.csv: no valid condition answers \(empty_condition_high 1; first: "):
        import_conditions(folder, [empty])
    # a failed import writes nothing: the previous import's report is still there (issue 18)
    assert read_report(folder / "conditions") == [(7, "", "bad_json")]


# ---------------------------------------------------------------------------------- export / import ratings


def test_ratings_export_hides_the_intended_similarity(rated: Path):
    with (rated / "ratings_tasks" / "hits.csv").open(newline="") as handle:
        hits = list(csv.DictReader(handle))
    assert list(hits[0]) == ["item_id", "sentence1", "sentence2", "condition"]
    tasks = read_tasks(rated / "ratings_tasks")
    assert [h["item_id"] for h in hits] == [t["item_id"] for t in tasks]
    assert {t["condition_type"] for t in tasks} == {"high", "low"}
    assert all(t["item_id"] == f"r-{t['pair_id']:016x}-{t['condition_type']}" for t in tasks)
    # a pair's two conditions are not handed out one after the other
    adjacent = sum(a["pair_id"] == b["pair_id"] for a, b in itertools.pairwise(tasks))
    assert adjacent < len(tasks) // 10


def test_simulated_raters_aggregate_to_the_hidden_truth(tmp_path: Path, rated: Path):
    items = read_tasks(rated / "ratings_tasks")
    rows, truth, bad = simulated_ratings(items)
    results = write_results(tmp_path / "ratings.csv", rows)
    for how in ("mean", "median"):
        record = import_ratings(rated, [results], RatingsImportOptions(aggregate=how), force=True)
        table = pq.read_table(rated / "ratings" / "items.parquet").to_pylist()
        individual = pq.read_table(rated / "ratings" / "ratings.parquet").to_pylist()
        for item in table[:40]:
            own = [r["rating"] for r in individual if r["item_id"] == item["item_id"] and not r["not_pertinent"]]
            if own:
                assert item["label"] == pytest.approx(getattr(np, how)(own))
        kept = [item for item in table if item["status"] == "kept"]
        error = np.array([item["label"] - truth[item["item_id"]] for item in kept])
        assert np.abs(error).mean() < 0.6
        assert np.corrcoef([i["label"] for i in kept], [truth[i["item_id"]] for i in kept])[0, 1] > 0.9
        # an item is dropped exactly when most of its raters flag it
        for item in table:
            assert (item["status"] == "not_pertinent") == (item["not_pertinent"] > item["answers"] / 2)
        dropped = {i["item_id"] for i in table if i["status"] == "not_pertinent"}
        assert dropped and len(dropped & bad) / len(dropped) > 0.8 and len(dropped & bad) / len(bad) > 0.7
        assert record["counts"]["items_kept"] == len(kept)

    agreement = json.loads((rated / "ratings" / "agreement.json").read_text())
    # three raters per item; a kept item keeps two ratings when one rater flagged it
    assert set(agreement["ratings_per_item"]) == {"2", "3"}
    assert sum(agreement["ratings_per_item"].values()) == agreement["items"]
    # kappa recomputed from the individual ratings of the kept items
    kept_ids = {i["item_id"] for i in table if i["status"] == "kept"}
    ids = sorted(kept_ids)
    counts = np.zeros((len(ids), 5), int)
    for r in individual:
        if r["item_id"] in kept_ids and not r["not_pertinent"]:
            counts[ids.index(r["item_id"]), r["rating"] - 1] += 1
    counts = counts[counts.sum(axis=1) >= 2]
    assert agreement["fleiss_kappa"] == pytest.approx(fleiss_kappa(counts).kappa, abs=1e-4)
    assert 0.2 < agreement["fleiss_kappa"] < 0.9
    workers = {w["worker_id"]: w for w in agreement["workers"]}
    assert agreement["workers"][0]["worker_id"] == "S"  # least agreeing first
    assert workers["S"]["spearman"] < 0.5
    assert min(workers[name]["spearman"] for name in RATERS) > 0.7
    assert workers["R1"]["within_1"] > workers["S"]["within_1"]


def test_import_ratings_reports_every_problem(tmp_path: Path, rated: Path):
    items = read_tasks(rated / "ratings_tasks")
    writer = next(t for t in items if t["writer_id"])
    base = {"worker_id": "R1", "not_pertinent": "", "rating": 3}
    rows = [
        dict(base, item_id=items[0]["item_id"]),  # row 2: fine
        dict(base, item_id=items[1]["item_id"], rating=7),  # 3
        dict(base, item_id=items[2]["item_id"], rating="four"),  # 4
        dict(base, item_id=items[3]["item_id"], rating=""),  # 5
        dict(base, item_id=items[4]["item_id"], rating="", not_pertinent="on"),  # 6: fine, flagged
        dict(base, item_id=items[5]["item_id"], not_pertinent="maybe"),  # 7
        dict(base, item_id="r-0000000000000000-high"),  # 8
        dict(base, item_id=items[0]["item_id"], rating=4),  # 9: R1 again on item 0
        dict(base, item_id=writer["item_id"], worker_id=writer["writer_id"]),  # 10
        dict(base, item_id=items[6]["item_id"], worker_id=""),  # 11
        dict(base, item_id=items[7]["item_id"], rating="2.0"),  # 12: fine
    ]
    path = write_results(tmp_path / "ratings.csv", rows, mturk=False)
    record = import_ratings(rated, [path], force=True)
    assert sorted((row, problem) for row, _, problem in read_report(rated / "ratings")) == [
        (3, "bad_rating"),
        (4, "bad_rating"),
        (5, "missing_rating"),
        (7, "bad_flag"),
        (8, "unknown_id"),
        (9, "duplicate_rating"),
        (10, "own_condition"),
        (11, "missing_worker"),
    ]
    assert record["counts"]["ratings_accepted"] == 3
    assert record["counts"]["items_kept"] == 2 and record["counts"]["items_not_pertinent"] == 1
    with pytest.raises(UserError, match=r"ratings.csv: missing field\(s\) worker_id"):
        import_ratings(rated, [write_results(tmp_path / "ratings.csv", [{"item_id": "x", "rating": 1}])])


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones included) and its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_a_failed_import_leaves_the_previous_output_untouched(tmp_path: Path, rated: Path):
    """Issue 18: every results file is read and checked before anything in the annotate folder changes, so an
    import with a broken results file fails with one line and leaves the last good import's files as they were."""
    items = read_tasks(rated / "ratings_tasks")
    rows, _, _ = simulated_ratings(items, seed=5)
    good = write_results(tmp_path / "good.csv", rows)
    out = ["--out", rated]
    assert "Fleiss' kappa" in cli("annotate", "import", "--stage", "ratings", *out, "--results", good)
    before = snapshot(rated)
    out_of_scale = write_results(tmp_path / "out_of_scale.csv", [dict(row, rating=9) for row in rows[:5]])
    no_rating = write_results(tmp_path / "no_rating.csv", [{"item_id": items[0]["item_id"], "worker_id": "R1"}])
    undecodable = tmp_path / "undecodable.csv"
    undecodable.write_bytes(good.read_bytes()[:200] + b"\xff\xfe\xfa" + good.read_bytes()[200:])
    not_json = tmp_path / "not_json.jsonl"
    not_json.write_text("{not json\n[1, 2]\n")
    broken = {
        "no valid ratings": [out_of_scale],
        "missing field": [good, no_rating],  # the second file is broken: the first one's rows are not used
        "not a readable results file": [undecodable],
        "not_json.jsonl: missing field(s) item_id": [not_json],
    }
    for message, files in broken.items():
        for force in ([], ["--force"]):
            results = [a for path in files for a in ("--results", path)]
            error = cli_error("annotate", "import", "--stage", "ratings", *out, *results, *force)
            assert message in error
            assert snapshot(rated) == before, message
    conditions = write_results(tmp_path / "conditions.csv", [{"task_id": "c-1", "condition_high": "x"}])
    before = snapshot(rated)
    assert "missing field(s) condition_low" in cli_error(
        "annotate", "import", "--stage", "conditions", *out, "--results", conditions, "--force"
    )
    assert snapshot(rated) == before


def test_atomic_writes_use_hidden_temporary_names(tmp_path: Path):
    target = tmp_path / "items.parquet"
    target.write_bytes(b"old")
    seen: list[str] = []

    def interrupted(handle) -> None:
        seen.append(Path(handle.name).name)
        handle.write(b"half written")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_atomic(target, interrupted)
    assert seen[0].startswith(".") and seen[0] != target.name
    assert target.read_bytes() == b"old"
    assert sorted(tmp_path.iterdir()) == [target]


# ------------------------------------------------------------------------------------------------------ split


def test_split_sizes_follow_the_ratios():
    assert split_sizes(100, (0.6, 0.15, 0.25)).tolist() == [60, 15, 25]
    assert split_sizes(6, (0.6, 0.15, 0.25)).tolist() == [4, 1, 1]
    assert parse_ratios("60:15:25") == pytest.approx((0.6, 0.15, 0.25))
    with pytest.raises(UserError, match="--ratios"):
        parse_ratios("60:40")


def test_sentence_pair_groups_match_across_pair_ids_and_order():
    s1 = pa.chunked_array([["A dog runs.", "a dog  runs.", "A cat.", "A cat."]])
    s2 = pa.chunked_array([["A cat.", "A CAT.", "A dog runs.", "A bird."]])
    groups = sentence_pair_groups(s1, s2)
    assert groups[0] == groups[1] == groups[2] != groups[3]


def test_split_keeps_sentence_pairs_whole(tmp_path: Path, rated: Path):
    # make some sentence pairs appear under two pair ids, once swapped, as repeated captions would
    items_path = rated / "ratings" / "items.parquet"
    items = pq.read_table(items_path)
    kept = items.filter(pa.compute.equal(items.column("status"), "kept")).to_pylist()
    types: dict[int, set] = {}
    for item in kept:
        types.setdefault(item["pair_id"], set()).add(item["condition_type"])
    complete = [pair for pair, kinds in types.items() if len(kinds) == 2][:8]
    copies = []
    for item in (i for i in kept if i["pair_id"] in complete):
        copy = dict(item, pair_id=item["pair_id"] + (1 << 62), sentence1=item["sentence2"].upper())
        copies.append(dict(copy, sentence2=item["sentence1"], item_id=item["item_id"] + "-copy"))
    table = pa.concat_tables([items, pa.Table.from_pylist(copies, schema=items.schema)])
    write_table(table, items_path)
    reseal(rated / "ratings")
    record = csts_split.split(rated, SplitOptions(seed=3), force=True)

    parts = {name: pq.read_table(rated / "csts" / f"{name}.parquet") for name in SPLITS}
    assert all(t.schema == CSTS_SCHEMA for t in parts.values())
    rows = {name: t.to_pylist() for name, t in parts.items()}
    total = sum(len(r) for r in rows.values())
    kept_ids = {i["pair_id"] for i in pa.Table.from_pylist(kept + copies).to_pylist()}
    assert (
        total
        == 2 * record["counts"]["train_pairs"]
        + 2 * record["counts"]["validation_pairs"]
        + 2 * (record["counts"]["test_pairs"])
    )
    assert record["counts"]["incomplete_pairs_dropped"] > 0  # items dropped as not pertinent leave pairs incomplete
    for name, share in zip(SPLITS, (0.6, 0.15, 0.25)):
        assert len(rows[name]) / total == pytest.approx(share, abs=0.05)
        assert {r["split"] for r in rows[name]} == {name}
        # each pair's two rows are consecutive, high first
        assert [r["condition_type"] for r in rows[name]] == ["high", "low"] * (len(rows[name]) // 2)
        assert all(a["pair_id"] == b["pair_id"] for a, b in zip(rows[name][::2], rows[name][1::2]))
        assert all(1 <= r["label"] <= 5 for r in rows[name])
    seen: dict[tuple, str] = {}
    for name, split_rows in rows.items():
        for r in split_rows:
            assert r["pair_id"] in kept_ids
            key = tuple(sorted((" ".join(r["sentence1"].lower().split()), " ".join(r["sentence2"].lower().split()))))
            assert seen.setdefault(key, name) == name, f"{key} in {seen[key]} and {name}"
    assert any(r["pair_id"] >= 1 << 62 for r in itertools.chain(*rows.values()))
    # the CSV holds the same rows as the Parquet
    import pyarrow.csv as pacsv

    for name, table in parts.items():
        from_csv = pacsv.read_csv(rated / "csts" / f"{name}.csv").to_pylist()
        assert [(r["pair_id"], r["condition"], r["label"]) for r in from_csv] == [
            (r["pair_id"], r["condition"], r["label"]) for r in table.to_pylist()
        ]
    # same seed, same split; another seed, another split
    assert csts_split.split(rated, SplitOptions(seed=3))["status"] == "up-to-date"
    csts_split.split(rated, SplitOptions(seed=4))
    assert pq.read_table(rated / "csts" / "test.parquet").column("pair_id").to_pylist() != [
        r["pair_id"] for r in rows["test"]
    ]


def test_split_label_spread_answers_keeps_the_order_with_the_answers_values(tmp_path: Path, rated: Path):
    """`--label-spread answers`: each split's labels keep the import's order (ties too) and take the spread of the
    people's own answers, where the rater model's posterior means are narrower; the metadata says so."""
    import_ratings(rated, [tmp_path / "r.csv"], RatingsImportOptions(aggregate="model"), force=True)
    cli("annotate", "split", "--out", rated)
    plain = pa.concat_tables(pq.read_table(rated / "csts" / f"{name}.parquet") for name in SPLITS)
    cli("annotate", "split", "--out", rated, "--label-spread", "answers")
    spread = pa.concat_tables(pq.read_table(rated / "csts" / f"{name}.parquet") for name in SPLITS)
    assert spread.column("pair_id").to_pylist() == plain.column("pair_id").to_pylist()
    before, after = plain.column("label").to_numpy(), spread.column("label").to_numpy()
    assert np.array_equal(np.sign(np.subtract.outer(before, before)), np.sign(np.subtract.outer(after, after)))
    answers = pq.read_table(rated / "ratings" / "ratings.parquet").column("rating").to_numpy()
    answers = answers[answers > 0].astype(np.int64)
    edges = [1, 1.5, 2.5, 3.5, 4.5, 5.0001]  # an answer v spread over the half points around it
    share = np.histogram(after, edges)[0] / len(after)
    assert share == pytest.approx(np.bincount(answers, minlength=6)[1:] / len(answers), abs=0.03)
    described = json.loads(pq.read_schema(rated / "csts" / "train.parquet").metadata[b"csts.labels"])
    assert described["spread"] == "answers" and "people's own 1-5 answers" in described["description"]
    assert "--label-spread" in cli_error("annotate", "split", "--out", rated, "--label-spread", "wide")


# -------------------------------------------------------------------------------------------------------- CLI

runner = CliRunner()


def cli(*args: str | Path) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def cli_error(*args: str | Path) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_cli_round_trip_through_a_manifest(tmp_path: Path, kept: pa.Table):
    """From the filter's kept shards under a manifest's work_dir to C-STS files, as a user runs it."""
    work = tmp_path / "work"
    manifest = tmp_path / "test.yaml"
    manifest.write_text(
        f"name: test\nwork_dir: {work}\ndata: {{format: coco, captions: {tmp_path}/c.json, images: {tmp_path}}}\n"
    )
    write_table(kept, work / "filter" / "kept" / shard_name(0))
    assert "--dataset/--manifest" in cli_error("annotate", "export", "--stage", "conditions")
    assert "no finished filter output" in cli_error("annotate", "export", "--stage", "conditions", "-m", manifest)
    record = {"stage": "filter", "status": "done", "fingerprint": "f1", "recorded_in_place": True}  # not a run's
    write_json(work / "filter" / "_stage.json", record)
    reseal(work / "filter")

    output = cli("annotate", "export", "--stage", "conditions", "-m", manifest, "--n", 60)
    assert output.startswith("60 condition-writing tasks sampled from")
    tasks = read_tasks(work / "annotate" / "conditions_tasks")
    assert "up to date" in cli("annotate", "export", "--stage", "conditions", "-m", manifest, "--n", 60)
    assert "--force" in cli_error("annotate", "export", "--stage", "conditions", "-m", manifest, "--n", 50)

    results = write_results(tmp_path / "conditions.csv", simulated_conditions(tasks))
    output = cli("annotate", "import", "--stage", "conditions", "-m", manifest, "--results", results)
    assert "60 of 60 tasks answered -> 120 (s1, s2, c) triplets" in output
    assert "only for --stage ratings" in cli_error(
        "annotate", "import", "--stage", "conditions", "-m", manifest, "--results", results, "--aggregate", "median"
    )
    assert "only for --stage conditions" in cli_error(
        "annotate", "export", "--stage", "ratings", "-m", manifest, "--n", 5
    )
    cli("annotate", "export", "--stage", "ratings", "-m", manifest)
    rows, _, _ = simulated_ratings(read_tasks(work / "annotate" / "ratings_tasks"))
    half = len(rows) // 2
    first = write_results(tmp_path / "batch1.csv", rows[:half])
    second = write_results(tmp_path / "batch2.jsonl", rows[half:])
    args = ["annotate", "import", "--stage", "ratings", "-m", manifest, "--results", first, "--results", second]
    output = cli(*args, "--aggregate", "median")
    assert re.search(
        r"Fleiss' kappa 0\.\d{3}, Krippendorff's alpha ordinal 0\.\d{3}, interval 0\.\d{3} over \d+ items with 2\+",
        output,
    )
    assert output.splitlines()[3].startswith("high vs low: ")
    assert output.splitlines()[4].split() == ["worker", "items", "spearman", "mean|diff|", "within", "1", "flag"]
    assert "must be mean, median, round or model" in cli_error(*args, "--aggregate", "mode")
    output = cli("annotate", "split", "-m", manifest, "--seed", 1)
    assert re.search(r"train +\d+ rows", output) and (work / "annotate" / "csts" / "test.csv").is_file()
    assert "--ratios" in cli_error("annotate", "split", "-m", manifest, "--ratios", "1:2")
    assert "--stage 'rating'" in cli_error("annotate", "export", "--stage", "rating", "-m", manifest)


def test_annotate_commands_document_every_option():
    import typer.main

    group = typer.main.get_command(app).commands["annotate"]
    assert set(group.commands) == {
        "export",
        "import",
        "split",
        "audit",
        "rate",
        "draft",
        "check-conditions",
        "crossfit",
    }
    for name, command in group.commands.items():
        assert command.help, name
        for param in command.params:
            assert getattr(param, "help", None), f"annotate {name} --{param.name} has no help text"


def fenced_blocks(markdown: str) -> dict[str, list[str]]:
    """The fenced code blocks of a Markdown text by info string ("" for plain blocks)."""
    blocks: dict[str, list[str]] = {}
    kind, lines = None, []
    for line in markdown.splitlines(keepends=True):
        if line.startswith("```"):
            if kind is None:
                kind, lines = line[3:].strip(), []
            else:
                blocks.setdefault(kind, []).append("".join(lines))
                kind = None
        elif kind is not None:
            lines.append(line)
    return blocks


def test_the_documented_example_runs_as_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Every `$ csts-pipeline annotate ...` of docs/annotate-audit.md's worked example, run from the repository root
    with its output folder in a temporary place, prints exactly what the document shows."""
    monkeypatch.chdir(REPO)
    text = (REPO / "docs" / "annotate-audit.md").read_text()
    example = text[text.index("## Worked example") :]
    blocks = fenced_blocks(example)
    steps = []
    for session in blocks["console"]:
        for chunk in re.split(r"^\$ ", session, flags=re.M)[1:]:
            command, *shown = chunk.rstrip("\n").split("\n")
            steps.append((command.split(), shown))
    assert len(steps) >= 9
    out = tmp_path / "annotate-example"
    written: set[str] = set()  # every line of every CSV file as each step left it (a later split replaces csts/)
    for command, shown in steps:
        assert command[:2] == ["csts-pipeline", "annotate"] or command[:2] == ["csts-pipeline", "export"], command
        args = [a.replace("runs/annotate-example", str(out)) for a in command[1:]]
        printed = cli(*args).replace(str(out), "runs/annotate-example")
        assert printed.rstrip("\n").split("\n") == shown, " ".join(command)
        written |= {line for path in out.rglob("*.csv") for line in path.read_text().splitlines()}
    # the file excerpts shown (plain ``` blocks) are lines of the files written
    assert len(blocks[""]) >= 4
    for line in "".join(blocks[""]).splitlines():
        assert line in written, line
