"""Hidden gold in live rating batches: controls mixed into hits.csv that look like any other row, the per-worker
sequential test at the import (blocklist.csv, `blocked` rows in report.csv, gold columns in workers.parquet),
gold anchoring the ordinal model, and no control ever reaching a split or the Hugging Face export."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from csts_pipeline.stages.annotate.crowd import hidden_gold
from csts_pipeline.stages.annotate.crowd.screening import Rating
from csts_pipeline.stages.annotate.labels import ordinal
from csts_pipeline.stages.annotate.labels.quality import anchored_fit

# the fixtures `kept`, `kept_dir` and `rated` come with the helpers
from tests.annotate.test_annotate import cli, kept, kept_dir, rated, read_report, read_tasks, write_results  # noqa: F401
from tests.support.simulate import gold_decisions

SHARE = 0.05
ITEM_ID = re.compile(r"^r-[0-9a-f]{16}-(high|low)$")


def hits_rows(folder: Path) -> tuple[list[str], list[dict[str, str]]]:
    with (folder / "hits.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def export_with_gold(folder: Path) -> list[dict]:
    cli("annotate", "export", "--stage", "ratings", "--out", folder, "--gold-share", SHARE, "--force")
    return read_tasks(folder / "ratings_tasks")


def test_controls_look_like_any_row_and_are_known_only_privately(rated: Path):  # noqa: F811
    plain_columns, plain = hits_rows(rated / "ratings_tasks")
    tasks = export_with_gold(rated)
    columns, rows = hits_rows(rated / "ratings_tasks")
    assert columns == plain_columns == ["item_id", "sentence1", "sentence2", "condition"]
    gold = [t for t in tasks if hidden_gold.is_gold(t)]
    assert abs(len(gold) / len(rows) - SHARE) <= 0.01
    assert len(rows) == len(plain) + len(gold) and [r["item_id"] for r in rows] == [t["item_id"] for t in tasks]
    assert all(ITEM_ID.match(r["item_id"]) for r in rows)  # the controls' ids have the real ids' shape
    captions = [int(r["item_id"][i : i + 8], 16) for r in plain for i in (2, 10)]
    for task in gold:  # and caption ids in the batch's own range
        first, second = (int(task["item_id"][i : i + 8], 16) for i in (2, 10))
        assert min(captions) <= first < second <= max(captions)
    assert {t["gold_source"] for t in gold} == {"qualification", "identical", "unmentioned"}
    text = (rated / "ratings_tasks" / "hits.csv").read_text()
    assert "gold" not in text.casefold() and "not_pertinent" not in text
    with (rated / "ratings_tasks" / "gold.csv").open(newline="") as handle:
        private = {r["item_id"]: r["gold_answer"] for r in csv.DictReader(handle)}
    assert private == {t["item_id"]: t["gold_answer"] for t in gold}
    for task in gold:
        if task["gold_source"] == "identical":
            assert task["sentence1"] == task["sentence2"] and task["gold_answer"] == "5"
        if task["gold_source"] == "unmentioned":
            keys = dict(hidden_gold.UNMENTIONED)[task["condition"]]
            words = f"{task['sentence1']} {task['sentence2']}".casefold()
            assert task["gold_answer"] == "not_pertinent" and not any(k in words for k in keys)
    # a rerun is a no-op; the same seed gives the same batch
    before = (rated / "ratings_tasks" / "hits.csv").read_bytes()
    assert cli("annotate", "export", "--stage", "ratings", "--out", rated, "--gold-share", SHARE).startswith("up to")
    export_with_gold(rated)
    assert (rated / "ratings_tasks" / "hits.csv").read_bytes() == before
    # controls are scattered through the batch, not appended at one end
    at = [i for i, t in enumerate(tasks) if hidden_gold.is_gold(t)]
    assert at[0] < len(tasks) // 2 < at[-1]


def test_the_share_stays_within_a_point():
    for n_real in (100, 239, 1000, 5003):  # from a batch of 100 on; a smaller one is off by half a row at most
        for share in (0.01, 0.05, 0.1, 0.2, 0.3):
            n = hidden_gold.gold_count(n_real, share)
            assert abs(n / (n + n_real) - share) <= 0.01, (n_real, share, n)


def test_random_answers_are_blocked_and_honest_workers_are_not():
    found, shares, _ = gold_decisions(range(20))  # 20 batches of 2,000 items, 20 workers each, 25% spammers
    assert all(abs(share - SHARE) <= 0.01 for share in shares)
    honest = [d for kind, decisions in found.items() if kind != "spammer" for d in decisions]
    spammers = found["spammer"]
    assert len(honest) == 300 and len(spammers) == 100
    assert honest.count("blocked") / len(honest) <= 0.05
    assert spammers.count("blocked") / len(spammers) >= 0.85
    assert spammers.count("cleared") / len(spammers) <= hidden_gold.BETA


def test_the_sequential_test_decides_as_stated():
    wrong, right = hidden_gold.WorkerGold(), hidden_gold.WorkerGold()
    for _ in range(3):  # three wrong answers in a row: 3 log 3 = 3.30 > log 19 = 2.94
        wrong.add(False)
    for _ in range(5):  # five right: 5 log 0.5 = -3.47 < -2.94
        right.add(True)
    assert (wrong.decision, wrong.decided_after) == ("blocked", 3)
    assert (right.decision, right.decided_after) == ("cleared", 5)
    two = hidden_gold.WorkerGold()
    two.add(False)
    two.add(False)
    assert two.decision == "undecided"
    assert hidden_gold.right("5", Rating(0, "w", "", 4, False)) and not hidden_gold.right(
        "5", Rating(0, "w", "", 3, False)
    )
    assert hidden_gold.right("not_pertinent", Rating(0, "w", "", None, True))
    assert not hidden_gold.right("1", Rating(0, "w", "", None, True))


def test_gold_anchors_the_ordinal_model():
    """Every worker lenient by a point: from the ratings alone the shift cannot be told from the labels, with
    controls of known label the model finds the bias and moves the labels back."""
    rng = np.random.default_rng(0)
    n_items, n_gold, workers = 300, 40, [f"W{j}" for j in range(6)]
    truth = rng.integers(1, 5, n_items + n_gold)  # 1-4, so that +1 stays on the scale
    item = np.repeat(np.arange(n_items + n_gold), 3)
    worker = np.array([workers[j] for j in rng.integers(0, len(workers), len(item))])
    rating = np.clip(truth[item] + 1 + np.rint(rng.normal(0, 0.4, len(item))), 1, 5)
    real, gold = item < n_items, item >= n_items

    def arrays(mask: np.ndarray, offset: int):
        from csts_pipeline.stages.annotate.labels.agreement import RatingArrays

        return RatingArrays(item[mask] - offset, worker[mask], rating[mask], np.zeros(mask.sum(), bool))

    alone = anchored_fit(arrays(real, 0), n_items, None)
    anchored = anchored_fit(arrays(real, 0), n_items, (arrays(gold, n_items), truth[n_items:]))
    error_alone = np.abs(alone.label - truth[:n_items]).mean()
    error_anchored = np.abs(anchored.label - truth[:n_items]).mean()
    assert anchored.posterior.shape == (n_items, len(ordinal.SCALE))
    assert np.all(anchored.bias > 0.6), anchored.bias
    assert error_anchored < 0.5 * error_alone, (error_anchored, error_alone)


def crowd_results(tasks: list[dict], seed: int = 0) -> list[dict]:
    """Five honest raters (the truth from the condition type, a little noise; controls answered right within a
    point) and the spammer S (uniform 1-5, flags 30% of the time) each answering every control and about half of
    the real items."""
    rng = np.random.default_rng(seed)
    rows = []
    for task in tasks:
        answer = task.get("gold_answer")
        for worker in ("H1", "H2", "H3", "H4", "H5", "S"):
            if answer is None and rng.random() < 0.5:
                continue
            if worker == "S":
                flagged, rating = rng.random() < 0.3, int(rng.integers(1, 6))
            elif answer is None:
                base = 4.5 if task["condition_type"] == "high" else 1.5
                flagged, rating = False, int(np.clip(np.rint(base + rng.normal(0, 0.5)), 1, 5))
            else:
                flagged = answer == "not_pertinent"
                rating = 3 if flagged else int(np.clip(int(answer) + rng.integers(-1, 2), 1, 5))
            rows.append(
                {
                    "item_id": task["item_id"],
                    "worker_id": worker,
                    "assignment_id": f"A-{len(rows)}",
                    "rating": "" if flagged else rating,
                    "not_pertinent": "true" if flagged else "false",
                }
            )
    return rows


def test_import_blocks_the_random_worker_and_keeps_gold_out_of_every_output(tmp_path: Path, rated: Path):  # noqa: F811
    tasks = export_with_gold(rated)
    gold_ids = {t["item_id"] for t in tasks if hidden_gold.is_gold(t)}
    gold_texts = {(t["sentence1"], t["sentence2"], t["condition"]) for t in tasks if hidden_gold.is_gold(t)}
    rows = crowd_results(tasks)
    results = write_results(tmp_path / "crowd.csv", rows)
    output = cli(
        "annotate", "import", "--stage", "ratings", "--out", rated, "--results", results, "--aggregate", "model"
    )
    assert "hidden gold:" in output and "1 blocked" in output
    ratings_dir = rated / "ratings"
    with (ratings_dir / "blocklist.csv").open(newline="") as handle:
        blocklist = list(csv.DictReader(handle))
    assert [r["WorkerId"] for r in blocklist] == ["S"] and "control answers wrong" in blocklist[0]["Reason"]
    blocked_rows = [r for r in read_report(ratings_dir) if r[2] == "blocked"]
    assert len(blocked_rows) == sum(r["worker_id"] == "S" for r in rows)
    workers = {w["worker_id"]: w for w in pq.read_table(ratings_dir / "workers.parquet").to_pylist()}
    assert set(workers) == {"H1", "H2", "H3", "H4", "H5"}
    assert all(w["gold_answers"] == len(gold_ids) and w["gold_accuracy"] >= 0.9 for w in workers.values())
    agreement = json.loads((ratings_dir / "agreement.json").read_text())
    assert agreement["gold"]["blocked"] == 1 and agreement["gold"]["rule"]["alpha"] == hidden_gold.ALPHA
    for name in ("items.parquet", "ratings.parquet"):
        ids = set(pq.read_table(ratings_dir / name).column("item_id").to_pylist())
        assert ids and not ids & gold_ids, name
    cli("annotate", "split", "--out", rated)
    for name in ("train", "validation", "test"):
        table = pq.read_table(rated / "csts" / f"{name}.parquet").to_pylist()
        assert not {(r["sentence1"], r["sentence2"], r["condition"]) for r in table} & gold_texts
        assert not set(r.get("item_id") for r in table) & gold_ids
        text = (rated / "csts" / f"{name}.csv").read_text()
        assert not any(i in text for i in gold_ids)
    hf = tmp_path / "hf"
    cli("export", "--annotate", rated, "--out", hf, "--name", "gold-test")
    assert "1 worker(s) blocked by a sequential probability ratio test" in (hf / "README.md").read_text()
    published = sorted(hf.rglob("*.parquet"))
    assert published
    for path in published:
        for row in pq.read_table(path).to_pylist():
            assert row.get("item_id") not in gold_ids, path
            assert (row.get("sentence1"), row.get("sentence2"), row.get("condition")) not in gold_texts, path
    for path in hf.rglob("*"):
        if path.suffix in (".csv", ".md", ".json", ".jsonl"):
            assert not any(i in path.read_text() for i in gold_ids), path


def test_bad_gold_share_is_one_line(rated: Path):  # noqa: F811
    from tests.annotate.test_annotate import cli_error

    assert "--gold-share must be in [0, 0.5)" in cli_error(
        "annotate", "export", "--stage", "ratings", "--out", rated, "--gold-share", "0.7", "--force"
    )
    assert "only with --gold-share" in cli_error(
        "annotate", "export", "--stage", "ratings", "--out", rated, "--gold", rated / "none.csv"
    )
    assert "gold file not found" in cli_error(
        "annotate", "export", "--stage", "ratings", "--out", rated, "--gold-share", "0.05", "--gold", rated / "none.csv"
    )
    assert "not with --more" in cli_error("annotate", "export", "--stage", "ratings", "--more", "--out", rated,
                                          "--gold-share", "0.05")  # fmt: skip
