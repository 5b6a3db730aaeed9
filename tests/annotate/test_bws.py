"""Best-Worst Scaling: the 4-tuple design, counting scores against an independent count, split-half reliability
with simulated workers, the results checks and `annotate split --labels bws`."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from scipy.stats import spearmanr

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.crowd.kept import kept_source
from csts_pipeline.stages.annotate.labels import bws_scores
from csts_pipeline.stages.annotate.steps import csts_split
from csts_pipeline.stages.annotate.steps.bws import export_bws, import_bws
from csts_pipeline.stages.annotate.steps.conditions import export_conditions, import_conditions
from csts_pipeline.stages.annotate.steps.options import (
    BwsExportOptions,
    BwsImportOptions,
    ConditionsExportOptions,
    SplitOptions,
)
from tests.annotate.test_annotate import cli, cli_error, kept_table, read_report, read_tasks, simulated_conditions
from tests.annotate.test_annotate import write_results as write_condition_results


@pytest.fixture(scope="module")
def conditions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An annotate folder with 120 pairs' written conditions (240 BWS items), made once."""
    root = tmp_path_factory.mktemp("bws")
    kept = root / "kept.parquet"
    pq.write_table(kept_table(), kept)
    folder = root / "annotate"
    export_conditions(folder, kept_source(None, kept), ConditionsExportOptions(n=120))
    results = write_condition_results(root / "c.csv", simulated_conditions(read_tasks(folder / "conditions_tasks")))
    import_conditions(folder, [results])
    return folder


def fresh(conditions: Path, tmp_path: Path) -> Path:
    """A copy of the conditions folder to export and import BWS into."""
    import shutil

    folder = tmp_path / "annotate"
    shutil.copytree(conditions, folder)
    return folder


def truth_of(items: list[dict], seed: int = 5) -> np.ndarray:
    """Hidden similarity per item: high conditions 3.5-5, low ones 1-2.5, as the rating simulation."""
    rng = np.random.default_rng(seed)
    high = np.array([item["condition_type"] == "high" for item in items])
    return np.where(high, rng.uniform(3.5, 5.0, len(items)), rng.uniform(1.0, 2.5, len(items)))


def simulate(design: np.ndarray, truth: np.ndarray, workers: int, noise: float, seed: int) -> tuple[np.ndarray, ...]:
    """Every worker answers every tuple: best and worst of the hidden scores plus Gaussian noise.
    Returns (tuple index, worker, best position, worst position) per answer."""
    rng = np.random.default_rng(seed)
    perceived = truth[design][None, :, :] + rng.normal(0, noise, (workers, *design.shape))
    tuple_index = np.tile(np.arange(len(design)), workers)
    worker = np.repeat(np.arange(workers), len(design))
    return tuple_index, worker, perceived.argmax(axis=2).ravel(), perceived.argmin(axis=2).ravel()


def write_bws_results(path: Path, tuples: list[dict], answers: tuple[np.ndarray, ...]) -> Path:
    """The answers as an MTurk batch-results CSV: Input.tuple_id, Answer.best/worst as positions 1-4."""
    tuple_index, worker, best, worst = answers
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["HITId", "AssignmentId", "WorkerId", "AssignmentStatus", "Input.tuple_id", "Answer.best", "Answer.worst"]
        )
        for row, (t, w, b, x) in enumerate(zip(tuple_index, worker, best, worst)):
            writer.writerow([f"H{t}", f"A{row}", f"W{w}", "Submitted", tuples[t]["tuple_id"], b + 1, x + 1])
    return path


# ----------------------------------------------------------------------------------------------- the design


@pytest.mark.parametrize("n_items", [4, 7, 15, 240, 1001])
def test_design_balances_appearances_and_spreads_pairs(n_items: int):
    design = bws_scores.design_tuples(n_items, seed=3)
    assert design.shape == (2 * n_items, 4)
    assert (np.sort(design, axis=1)[:, 1:] != np.sort(design, axis=1)[:, :-1]).all()  # no item twice in a tuple
    assert (np.bincount(design.ravel(), minlength=n_items) == 8).all()
    stats = bws_scores.design_stats(design, n_items)
    assert stats["appearances_min"] == stats["appearances_max"] == 8
    # 12 N pairs of items meet in the tuples: with many items, fewer than 5% of them meet more than once
    if n_items >= 240:
        assert stats["max_cooccurrence"] <= 3
        assert stats["pairs_sharing_2_plus_tuples"] < 0.05 * n_items * 12
    assert (bws_scores.design_tuples(n_items, seed=3) == design).all()
    assert n_items < 15 or (bws_scores.design_tuples(n_items, seed=4) != design).any()


def test_design_with_appearances_not_a_multiple_of_four():
    design = bws_scores.design_tuples(10, seed=0, appearances=3)
    seen = np.bincount(design.ravel(), minlength=10)
    assert len(design) == 8 and seen.min() == 3 and seen.max() == 4
    with pytest.raises(UserError, match="at least 4 items"):
        bws_scores.design_tuples(3, seed=0)


# ------------------------------------------------------------------------------------- scores, reliability


def test_counting_scores_of_a_hand_worked_case():
    design = np.array([[0, 1, 2, 3], [0, 1, 2, 4]])
    answers = bws_scores.Annotations(np.array([0, 0, 1]), np.array([0, 0, 4]), np.array([3, 1, 0]), np.array(["a"] * 3))
    scores = bws_scores.counting_scores(design, answers, 6)
    # item 0: best twice, worst once, seen three times; item 5 never shown
    assert scores.seen.tolist() == [3, 3, 3, 2, 1, 0]
    assert np.allclose(scores.score[:5], [1 / 3, -1 / 3, 0, -1 / 2, 1])
    assert np.isnan(scores.score[5])
    assert np.allclose(scores.unit[:5], [2 / 3, 1 / 3, 0.5, 0.25, 1])
    assert np.allclose(scores.likert[:5], [1 + 4 * 2 / 3, 1 + 4 / 3, 3, 2, 5])


def reliability_for(workers: int, noise: float = 1.0, repeats: int = 60) -> tuple[float, float]:
    """(split-half reliability, Spearman of the scores with the truth) for 240 simulated items."""
    n_items = 240
    truth = np.random.default_rng(0).uniform(1, 5, n_items)
    design = bws_scores.design_tuples(n_items, seed=0)
    tuple_index, worker, best, worst = simulate(design, truth, workers, noise, seed=workers)
    answers = bws_scores.Annotations(
        tuple_index, design[tuple_index, best], design[tuple_index, worst], worker.astype(str)
    )
    scores = bws_scores.counting_scores(design, answers, n_items)
    half = bws_scores.split_half(design, answers, n_items, repeats, seed=0)
    return half["spearman"], spearmanr(scores.score, truth).statistic


def test_reliability_rises_with_more_workers_and_scores_follow_the_truth():
    figures = {workers: reliability_for(workers) for workers in (2, 4, 8)}
    halves = [figures[w][0] for w in (2, 4, 8)]
    truths = [figures[w][1] for w in (2, 4, 8)]
    assert halves[0] < halves[1] < halves[2], figures
    assert truths[0] < truths[1] < truths[2], figures
    assert truths[0] > 0.7 and halves[2] > 0.85, figures


def test_split_half_is_seeded_and_spearman_brown_is_labelled():
    n_items = 40
    design = bws_scores.design_tuples(n_items, seed=1)
    tuple_index, worker, best, worst = simulate(design, np.arange(n_items, dtype=float), 3, 5.0, seed=1)
    answers = bws_scores.Annotations(
        tuple_index, design[tuple_index, best], design[tuple_index, worst], worker.astype(str)
    )
    first = bws_scores.split_half(design, answers, n_items, 20, seed=7)
    assert first == bws_scores.split_half(design, answers, n_items, 20, seed=7)
    assert first != bws_scores.split_half(design, answers, n_items, 20, seed=8)
    rho = first["spearman"]
    assert first["spearman_brown"] == pytest.approx(2 * rho / (1 + rho), abs=2e-4)
    one_each = answers.take(worker == 0)
    assert bws_scores.split_half(design, one_each, n_items, 5, seed=0)["spearman"] is None


# ------------------------------------------------------------------------------------------ the two steps


def test_bws_round_trip_scores_equal_an_independent_count(conditions: Path, tmp_path: Path):
    folder = fresh(conditions, tmp_path)
    record = export_bws(folder, BwsExportOptions(seed=2))
    assert record["counts"] == {"items": 240, "tuples": 480}
    assert record["design"]["appearances_min"] == record["design"]["appearances_max"] == 8
    tuples = read_tasks(folder / "bws_tasks")
    items = [json.loads(line) for line in (folder / "bws_tasks" / "items.jsonl").read_text().splitlines()]
    with (folder / "bws_tasks" / "hits.csv").open(newline="") as handle:
        hits = list(csv.DictReader(handle))
    assert list(hits[0]) == ["tuple_id"] + [f"{n}_{k}" for k in range(1, 5) for n in bws_fields()]
    by_id = {item["item_id"]: item for item in items}
    first = by_id[tuples[0]["item_ids"][2]]
    assert hits[0]["condition_3"] == first["condition"] and hits[0]["sentence1_3"] == first["sentence1"]
    assert "high" not in "".join(hits[0].values())  # the HIT does not say which condition was meant high or low

    design = np.array([[items.index(by_id[i]) for i in t["item_ids"]] for t in tuples])
    truth = truth_of(items)
    answers = simulate(design, truth, workers=3, noise=0.7, seed=9)
    results = write_bws_results(tmp_path / "bws.csv", tuples, answers)
    record = import_bws(folder, [results], BwsImportOptions(repeats=100))
    assert record["counts"]["accepted"] == 3 * 480 and record["counts"]["items_scored"] == 240
    reliability = json.loads((folder / "bws" / "reliability.json").read_text())
    assert reliability["annotations_per_tuple"] == {"3": 480} and reliability["repeats"] == 100
    assert 0.5 < reliability["spearman"] < reliability["spearman_brown"] < 1

    # an independent count straight from the results file and the tuple file
    best, worst, seen = Counter(), Counter(), Counter()
    members = {t["tuple_id"]: t["item_ids"] for t in tuples}
    with results.open(newline="") as handle:
        for row in csv.DictReader(handle):
            shown = members[row["Input.tuple_id"]]
            seen.update(shown)
            best[shown[int(row["Answer.best"]) - 1]] += 1
            worst[shown[int(row["Answer.worst"]) - 1]] += 1
    table = pq.read_table(folder / "bws" / "items.parquet").to_pylist()
    for row in table:
        expected = (best[row["item_id"]] - worst[row["item_id"]]) / seen[row["item_id"]]
        assert row["score"] == pytest.approx(expected, abs=1e-12)
        assert row["label"] == pytest.approx(1 + 4 * (expected + 1) / 2, abs=1e-12)
        assert (row["best"], row["worst"], row["seen"]) == (best[row["item_id"]], worst[row["item_id"]], 24)
    scores = np.array([row["score"] for row in table])
    assert spearmanr(scores, truth).statistic > 0.85
    assert import_bws(folder, [results], BwsImportOptions(repeats=100))["status"] == "up-to-date"

    record = csts_split.split(folder, SplitOptions(labels="bws"))
    assert record["labels"]["source"] == "bws"
    train = pq.read_table(folder / "csts" / "train.parquet")
    assert train.schema.metadata[b"csts.label_range"] == b"1 5"
    assert json.loads(train.schema.metadata[b"csts.labels"])["source"] == "bws"
    labels = {(r["item_id"]): r["label"] for r in table}
    for row in train.to_pylist():
        kind = row["condition_type"]
        assert labels[f"r-{row['pair_id']:016x}-{kind}"] == row["label"]


def bws_fields() -> tuple[str, ...]:
    return ("sentence1", "sentence2", "condition")


def test_bws_import_reports_every_bad_row(conditions: Path, tmp_path: Path):
    folder = fresh(conditions, tmp_path)
    export_bws(folder)
    tuples = read_tasks(folder / "bws_tasks")
    t0, t1 = tuples[0]["tuple_id"], tuples[1]["tuple_id"]
    rows = [
        ["A1", "W1", t0, "1", "4"],  # row 2: fine
        ["A2", "W1", "b-0000000000000000", "1", "2"],  # unknown tuple
        ["A3", "W2", t0, "2", "2"],  # best equal to worst
        ["A4", "W2", t1, "", "3"],  # no best
        ["A5", "W2", t1, "1", "7"],  # not a position
        ["A6", "W1", t0, "2", "3"],  # the same worker on the same tuple again
        ["A7", "", t1, "1", "2"],  # no worker
        ["A1", "W3", t1, "1", "2"],  # an assignment seen before
        ["A9", "W3", t0, "2.0", "3"],  # row 10: fine, 2.0 read as 2
    ]
    path = tmp_path / "results.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["AssignmentId", "WorkerId", "Input.tuple_id", "Answer.best", "Answer.worst"])
        writer.writerows(rows)
    record = import_bws(folder, [path], BwsImportOptions(repeats=10))
    assert record["counts"]["accepted"] == 2
    problems = {(row, problem) for row, _, problem in read_report(folder / "bws")}
    assert problems == {
        (3, "unknown_id"),
        (4, "same_best_worst"),
        (5, "missing_best"),
        (6, "bad_worst"),
        (7, "duplicate_answer"),
        (8, "missing_worker"),
        (9, "duplicate_assignment"),
    }
    annotations = pq.read_table(folder / "bws" / "annotations.parquet").to_pylist()
    assert [a["best_item_id"] for a in annotations] == [tuples[0]["item_ids"][0], tuples[0]["item_ids"][1]]

    missing = tmp_path / "missing.csv"
    missing.write_text("Input.tuple_id,Answer.best,WorkerId\nx,1,W\n")
    with pytest.raises(UserError, match=r"missing\.csv: missing field\(s\) worst"):
        import_bws(folder, [missing], BwsImportOptions(repeats=10), force=True)


def test_bws_command_line(conditions: Path, tmp_path: Path):
    folder = fresh(conditions, tmp_path)
    output = cli("annotate", "export", "--stage", "bws", "--out", folder, "--seed", 1)
    assert output.startswith("480 best-worst 4-tuples of 240 items (each item in 8 tuples; no two items share")
    assert "only for --stage bws" in cli_error(
        "annotate", "export", "--stage", "ratings", "--out", folder, "--appearances", 4
    )
    assert "--force" in cli_error("annotate", "export", "--stage", "bws", "--out", folder, "--seed", 2)
    tuples = read_tasks(folder / "bws_tasks")
    items = [json.loads(line) for line in (folder / "bws_tasks" / "items.jsonl").read_text().splitlines()]
    index = {item["item_id"]: i for i, item in enumerate(items)}
    design = np.array([[index[i] for i in t["item_ids"]] for t in tuples])
    results = write_bws_results(tmp_path / "r.csv", tuples, simulate(design, truth_of(items), 2, 0.5, 0))
    output = cli("annotate", "import", "--stage", "bws", "--out", folder, "--results", results, "--repeats", 50)
    lines = output.splitlines()
    assert lines[1] == "480 of 480 tuples answered (480 with 2 answers) by 2 workers"
    assert lines[3].startswith("split-half reliability (Spearman, mean of 50 random splits, seed 0) 0.")
    assert "Spearman-Brown corrected 0." in lines[3]
    assert "only for --stage bws" in cli_error(
        "annotate", "import", "--stage", "ratings", "--out", folder, "--results", results, "--repeats", 5
    )
    output = cli("annotate", "split", "--out", folder, "--labels", "bws")
    assert (
        "labels: Best-Worst Scaling counting scores (best - worst) / seen in [-1, 1], mapped linearly to 1-5" in output
    )
    assert "--labels must be likert or bws" in cli_error("annotate", "split", "--out", folder, "--labels", "x")
