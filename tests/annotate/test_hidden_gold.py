"""Hidden gold in live rating batches: controls mixed into hits.csv that look like any other row, the per-worker
sequential test at the import (blocklist.csv, `blocked` rows in report.csv, gold columns in workers.parquet),
gold anchoring the ordinal model, and no control ever reaching a split or the Hugging Face export."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from csts_pipeline.pipeline.shards import shard_name, write_table
from csts_pipeline.stages.annotate.aggregation.em import ordinal
from csts_pipeline.stages.annotate.aggregation.weighing import anchored_fit
from csts_pipeline.stages.annotate.crowd import controls, gold_set, hidden_gold
from csts_pipeline.stages.annotate.crowd.screening import Rating
from csts_pipeline.testing.simulate import gold_decisions

# the fixtures `kept`, `kept_dir` and `rated` come with the helpers
from tests.annotate.test_annotate import (  # noqa: F401
    cli,
    kept,
    kept_dir,
    kept_table,
    rated,
    read_report,
    read_tasks,
    write_results,
)

SHARE = 0.05
ITEM_ID = re.compile(r"^r-[0-9a-f]{16}-(high|low)$")


def hits_rows(folder: Path) -> tuple[list[str], list[dict[str, str]]]:
    with (folder / "hits.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def export_with_gold(folder: Path, *more: str | Path) -> list[dict]:
    shards = folder.parent / "kept"  # the fixture's kept shards: controls are made from those outside the batch
    cli("annotate", "export", "--stage", "ratings", "--out", folder, "--gold-share", SHARE, "--input", shards,
        "--force", *more)  # fmt: skip
    return read_tasks(folder / "ratings_tasks")


def partner(item_id: str) -> str:
    return item_id[: -len("high")] + "low" if item_id.endswith("-high") else item_id[: -len("low")] + "high"


def test_controls_look_like_any_row_and_are_known_only_privately(rated: Path, kept: pa.Table):  # noqa: F811
    plain_columns, plain = hits_rows(rated / "ratings_tasks")
    tasks = export_with_gold(rated)
    columns, rows = hits_rows(rated / "ratings_tasks")
    assert columns == plain_columns == ["item_id", "sentence1", "sentence2", "condition"]
    gold = [t for t in tasks if hidden_gold.is_control(t)]
    assert abs(len(gold) / len(rows) - SHARE) <= 0.01
    assert len(rows) == len(plain) + len(gold) and [r["item_id"] for r in rows] == [t["item_id"] for t in tasks]
    assert all(ITEM_ID.match(r["item_id"]) for r in rows)  # the controls' ids have the real ids' shape
    by_id = {t["item_id"]: t for t in tasks}
    kept_ids = set(kept.column("pair_id").to_pylist())
    batch = {t["pair_id"] for t in tasks if not hidden_gold.is_control(t)}
    for task in gold:  # a whole pair, on a kept pair of the run outside the batch, like any real pair
        other = by_id[partner(task["item_id"])]
        assert hidden_gold.is_control(other) and other["pair_id"] == task["pair_id"]
        assert hidden_gold.is_gold(task) or hidden_gold.is_gold(other)  # at least one row of a pair is scored
        assert (other["sentence1"], other["sentence2"]) == (task["sentence1"], task["sentence2"])
        assert other["condition"] != task["condition"]
        assert task["pair_id"] in kept_ids and task["pair_id"] not in batch
    assert all(partner(r["item_id"]) in by_id for r in rows)
    assert {t["gold_source"] for t in gold} == {"kind", "unmentioned"}
    text = (rated / "ratings_tasks" / "hits.csv").read_text()
    assert "gold" not in text.casefold() and "not_pertinent" not in text
    with (rated / "ratings_tasks" / "gold.csv").open(newline="") as handle:
        private = {r["item_id"]: r["gold_answer"] for r in csv.DictReader(handle)}
    assert private == {t["item_id"]: t["gold_answer"] or "" for t in gold}  # a row that fills a pair out: ""
    for task in filter(hidden_gold.is_gold, gold):
        both = f"{task['sentence1']} {task['sentence2']}"
        category, asks_kind = controls.condition_category(task["condition"])
        if task["gold_answer"] == "not_pertinent":  # about a category neither sentence names
            assert category is None or not controls.kinds_in(both, category)[1], task
        elif controls.counts_people(task["condition"]):  # one count of people in each: the same (5) or not (1)
            first, second = (controls.people_count(task[f"sentence{n}"]) for n in (1, 2))
            assert first is not None and second is not None
            assert task["gold_answer"] == ("5" if first == second else "1"), task
        else:  # one kind in each sentence: the same (5) or two (1)
            first, second = (controls.kinds_in(task[f"sentence{n}"], category)[0] for n in (1, 2))
            assert asks_kind and len(first) == len(second) == 1
            assert task["gold_answer"] == ("5" if first == second else "1"), task
    # a rerun is a no-op; the same seed gives the same batch
    before = (rated / "ratings_tasks" / "hits.csv").read_bytes()
    again = (
        "annotate",
        "export",
        "--stage",
        "ratings",
        "--out",
        rated,
        "--gold-share",
        SHARE,
        "--input",
        rated.parent / "kept",
    )
    assert cli(*again).startswith("up to")
    export_with_gold(rated)
    assert (rated / "ratings_tasks" / "hits.csv").read_bytes() == before
    # controls are scattered through the batch, not appended at one end
    at = [i for i, t in enumerate(tasks) if hidden_gold.is_control(t)]
    assert at[0] < len(tasks) // 2 < at[-1]


def test_gold_file_controls_leave_out_the_qualification_test(tmp_path: Path, rated: Path):  # noqa: F811
    """A --gold file's rate items become controls only where the workers have not seen them: not the pairs of
    the exported qualification test, never the package's public default set."""
    cli("annotate", "export", "--stage", "qualification", "--out", rated)
    default = gold_set.default_gold().read_text(encoding="utf-8")
    extra = (
        "x-r1,rate,A brown horse grazes in a fenced field.,A white horse stands in a muddy paddock.,"
        "The type of animal.,5,both horses\n"
        "x-r2,rate,A red bus stops at a corner.,A green tram passes a church.,The colour of the vehicle.,1,"
        "red and green\n"
    )
    gold = tmp_path / "gold.csv"
    gold.write_text(default + extra, encoding="utf-8")
    tasks = export_with_gold(rated, "--gold", gold)
    from_gold = [t for t in tasks if t.get("gold_source") == "qualification"]
    assert {t["sentence1"] for t in from_gold} == {
        "A brown horse grazes in a fenced field.",
        "A red bus stops at a corner.",
    }
    shown = set(gold_set.read_gold(gold_set.default_gold())[0].values())
    assert not any(t["sentence1"] in shown or t["sentence2"] in shown for t in tasks if hidden_gold.is_control(t))
    answers = {t["condition"]: t["gold_answer"] for t in from_gold}
    assert answers["The type of animal."] == "5" and answers["The colour of the vehicle."] == "1"
    assert len(from_gold) == 4  # each with a partner row: not pertinent, or not scored
    assert sorted(map(str, answers.values())).count("5") == 1 and set(answers.values()) <= {
        "5",
        "1",
        "not_pertinent",
        None,
    }


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
    scored = {t["item_id"] for t in tasks if hidden_gold.is_gold(t)}
    gold_ids = {t["item_id"] for t in tasks if hidden_gold.is_control(t)}  # scored or filling a pair out
    gold_texts = {(t["sentence1"], t["sentence2"], t["condition"]) for t in tasks if hidden_gold.is_control(t)}
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
    assert all(w["gold_answers"] == len(scored) and w["gold_accuracy"] >= 0.9 for w in workers.values())
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
        "annotate",
        "export",
        "--stage",
        "ratings",
        "--out",
        rated,
        "--gold-share",
        "0.05",
        "--gold",
        rated / "none.csv",
        "--input",
        rated.parent / "kept",
    )
    assert cli_error("annotate", "export", "--stage", "ratings", "--out", rated, "--gold-share", "0.05") == (
        "error: --gold-share: controls are made from kept pairs outside the batch; give --dataset/--manifest "
        "(reads <work_dir>/filter/kept/) or --input PATH"
    )
    assert cli_error("annotate", "export", "--stage", "ratings", "--out", rated, "--input", rated) == (
        "error: --input: only for --stage conditions, or ratings with --gold-share"
    )
    assert "--gold-share: only for --stage ratings, not for --stage ratings --more" in cli_error(
        "annotate", "export", "--stage", "ratings", "--more", "--out", rated, "--gold-share", "0.05"
    )


# ------------------------------------------------------------------------------------------------ the spammer

# conditions as a crowd writes them: many, a few common, most rare (weights fall off as 1/rank); the sample
# fixture's eight, used thirty times each, would make every condition's count a fingerprint of its own
WRITTEN = [
    "The type of animal.", "The location.", "The number of people.", "The activity.", "The weather.",
    "The time of day.", "The type of vehicle.", "The food on the table.", "The colour of the vehicle.",
    "What the people are doing.", "The setting of the scene.", "The sport being played.", "The kind of food.",
    "The clothing of the person.", "The size of the animal.", "The colour of the animal.", "The age of the people.",
    "The surface they are on.", "The objects on the table.", "The place.", "The lighting.", "The season.",
    "The direction of movement.", "The number of animals.", "The room.", "The background.", "The position of the man.",
    "What the animal is doing.", "The breed of the dog.", "The colour of the bus.", "The kind of meal.",
    "The water in the scene.", "The furniture.", "The group size.", "The pose of the person.",
    "The mode of transport.", "What is being eaten.", "The ground.", "The sky.", "The kind of building.",
]  # fmt: skip


def written_conditions(tasks: list[dict], seed: int) -> list[dict]:
    """One writer per pair, two different conditions drawn by a long-tailed frequency."""
    rng = np.random.default_rng(seed)
    weights = 1 / np.arange(1, len(WRITTEN) + 1)
    rows = []
    for index, task in enumerate(tasks):
        high, low = rng.choice(len(WRITTEN), size=2, replace=False, p=weights / weights.sum())
        rows.append({"task_id": task["task_id"], "worker_id": f"W{index % 5}", "assignment_id": f"A-{index}",
                     "condition_high": WRITTEN[high], "condition_low": WRITTEN[low]})  # fmt: skip
    return rows


def spammer_features(rows: list[dict[str, str]], shown: set[str]) -> np.ndarray:
    """What a worker can see of each row of hits.csv, as numbers: its partner (present, same sentences, another
    condition), identical sentences, the lengths of the sentences and the condition, the id (shape, caption ids
    in order and their rank among the batch's, the gap between them, high or low), the row's place, whether any
    text is in the qualification test the worker took (`shown`), how often its sentences, its sentence pair, its
    condition and its caption ids occur in the batch, and the words its two sentences share."""
    by_id = {r["item_id"]: r for r in rows}
    texts = Counter(t for r in rows for t in (r["sentence1"], r["sentence2"]))
    conditions, pairs = Counter(r["condition"] for r in rows), Counter((r["sentence1"], r["sentence2"]) for r in rows)
    parsed = [ITEM_ID_PARTS.match(r["item_id"]) for r in rows]
    captions = Counter(m.group(n) for m in parsed if m for n in (1, 2))
    ranks = sorted(int(c, 16) for c in captions)
    features = []
    for place, (row, match) in enumerate(zip(rows, parsed)):
        first, second = (int(match.group(n), 16) for n in (1, 2)) if match else (0, 0)
        other = by_id.get(partner(row["item_id"]))
        same = other is not None and (other["sentence1"], other["sentence2"]) == (row["sentence1"], row["sentence2"])
        words1, words2 = (set(re.findall(r"[a-z]+", row[f"sentence{n}"].casefold())) for n in (1, 2))
        features.append([
            other is not None, same, other is not None and other["condition"] != row["condition"],
            row["sentence1"].casefold() == row["sentence2"].casefold(),
            *(len(row[name].split()) for name in ("sentence1", "sentence2", "condition")),
            *(len(row[name]) for name in ("sentence1", "sentence2", "condition")),
            match is not None, first < second, *(np.searchsorted(ranks, c) / len(ranks) for c in (first, second)),
            np.log1p(abs(second - first)), row["item_id"].endswith("-high"), place / len(rows),
            any(row[name] in shown for name in ("sentence1", "sentence2", "condition")),
            texts[row["sentence1"]], texts[row["sentence2"]], pairs[row["sentence1"], row["sentence2"]],
            conditions[row["condition"]], *(captions[match.group(n)] if match else 0 for n in (1, 2)),
            len(words1 & words2) / max(1, len(words1 | words2)),
        ])  # fmt: skip
    return np.array(features, np.float64)


ITEM_ID_PARTS = re.compile(r"^r-([0-9a-f]{8})([0-9a-f]{8})-(high|low)$")
SEEDS = 12  # batches exported with seeds 0..11
SPAM_SHARE = 0.1


def out_of_fold_auc(features: np.ndarray, is_control: np.ndarray, pairs: np.ndarray, seed: int) -> dict[str, float]:
    """The area under the ROC curve of a logistic regression and of a decision tree (depth 4) that learn, from
    four fifths of the rows with their labels, which rows are controls, scored on the fifth they did not see.
    A pair's two rows stay in one fifth (`pairs`): a row's partner shares its sentences and so its lengths and
    words, and told that one row is a control, a model would only have to find its twin."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedGroupKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeClassifier

    folds = StratifiedGroupKFold(5, shuffle=True, random_state=seed)
    models = {
        "logistic": make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)),
        "tree": DecisionTreeClassifier(max_depth=4, random_state=seed),
    }
    found = {}
    for name, model in models.items():
        scores = cross_val_predict(model, features, is_control, groups=pairs, cv=folds, method="predict_proba")
        found[name] = float(roc_auc_score(is_control, scores[:, 1]))
    return found


# what a spammer sees, in groups of spammer_features' columns: a model is fitted on each group and on all
GROUPS = {
    "pairing": (0, 1, 2, 3),
    "sentences": (4, 5, 7, 8, 18, 19, 20, 24),
    "ids and order": (10, 11, 12, 13, 14, 15, 16, 22, 23),
    "condition": (6, 9, 17, 21),
    "all": tuple(range(25)),
}


def spammer_aucs(
    folder: Path, shards: Path
) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float], float]:
    """Every (group, model)'s mean out-of-fold AUC over SEEDS batches exported from `folder`; the same with the
    labels shuffled between the pairs (chance, as this procedure measures it: with few distinct values, as a
    condition's counts have, cross-validation scores below 0.5 on no signal); and the standard deviation of such
    a mean (Hanley and McNeil's variance of one AUC, (n0 + n1 + 1) / (12 n0 n1), over SEEDS batches)."""
    shown = set(hits_rows(folder / "qualification_tasks")[1][0].values())
    found: dict[tuple[str, str], list[float]] = {}
    chance: dict[tuple[str, str], list[float]] = {}
    variance = []
    for seed in range(SEEDS):
        cli("annotate", "export", "--stage", "ratings", "--out", folder, "--gold-share", SPAM_SHARE, "--seed", seed,
            "--input", shards, "--force")  # fmt: skip
        rows = hits_rows(folder / "ratings_tasks")[1]  # all a worker has: hits.csv, and the test they took
        with (folder / "ratings_tasks" / "gold.csv").open(newline="") as handle:
            gold = {r["item_id"] for r in csv.DictReader(handle)}
        is_control = np.array([r["item_id"] in gold for r in rows])
        pairs = np.array([r["item_id"].rsplit("-", 1)[0] for r in rows])
        names, at = np.unique(pairs, return_inverse=True)
        shuffled = np.zeros(len(names), bool)
        shuffled[np.flatnonzero(np.isin(names, pairs[is_control]))] = True
        shuffled = np.random.default_rng(seed).permutation(shuffled)[at]  # the same number of pairs, at random
        features = spammer_features(rows, shown)
        for group, columns in GROUPS.items():
            for labels, into in ((is_control, found), (shuffled, chance)):
                for model, auc in out_of_fold_auc(features[:, columns], labels, pairs, seed).items():
                    into.setdefault((group, model), []).append(auc)
        n1, n0 = int(is_control.sum()), int((~is_control).sum())
        variance.append((n0 + n1 + 1) / (12 * n0 * n1))

    def mean(values: dict[tuple[str, str], list[float]]) -> dict[tuple[str, str], float]:
        return {key: float(np.mean(aucs)) for key, aucs in values.items()}

    return mean(found), mean(chance), float(np.sqrt(np.mean(variance) / SEEDS))


@pytest.mark.slow
def test_a_spammer_cannot_tell_the_controls_from_the_real_rows(tmp_path: Path):
    """A spammer who knew, for four fifths of a batch's pairs, which rows are controls, and learnt from every
    column and the rows' pairing, ranks the other fifth's controls no better than chance: over 12 batches (2,080
    COCO caption pairs kept, 120 in the batch, 10% controls) the mean out-of-fold AUC of a logistic regression
    and of a decision tree, on each group of features and on all, stays within 3 standard deviations of that
    mean (about 0.05) above the same procedure's mean on labels shuffled between the pairs, and below 0.55."""
    many = kept_table(n_images=417, pairs_per_image_pair=5)
    shards = tmp_path / "kept"
    write_table(many.slice(0, many.num_rows // 2), shards / shard_name(0))
    write_table(many.slice(many.num_rows // 2), shards / shard_name(1))
    folder = tmp_path / "annotate"
    cli("annotate", "export", "--stage", "qualification", "--out", folder)
    cli("annotate", "export", "--stage", "conditions", "--input", shards, "--n", 120, "--out", folder)
    written = write_results(tmp_path / "c.csv", written_conditions(read_tasks(folder / "conditions_tasks"), 1))
    cli("annotate", "import", "--stage", "conditions", "--results", written, "--out", folder)
    means, chance, sd = spammer_aucs(folder, shards)
    print({f"{g}/{m}": (round(v, 3), round(chance[g, m], 3)) for (g, m), v in means.items()}, f"sd {sd:.4f}")
    assert all(mean < chance[key] + 3 * sd and mean < 0.5 + 3 * sd for key, mean in means.items()), (means, chance)


def test_a_controls_answer_follows_from_its_sentences():
    """The word lists decide a control's answer only where the captions leave no doubt."""
    rng = np.random.default_rng(0)
    conditions = controls.Conditions([])
    pair = {"sentence1": "A brown dog runs along the beach.", "sentence2": "Two dogs sleep on a couch at home."}
    rows = controls._rows("kind", pair, [], conditions, rng)  # one kind in each: the same, 5
    assert rows[0][2:] == ("The type of animal.", "5")  # (home is a place, but not one of the compared kinds)
    assert rows[1][3] == "not_pertinent" and controls.condition_category(rows[1][2])[0] in (
        "food",
        "people",
        "weather",
        "time",
        "vehicle",
    )
    pair = {"sentence1": "A horse grazes in a field.", "sentence2": "A cat sleeps in a field."}
    assert controls._rows("kind", pair, [], conditions, rng)[0][2:] == ("The type of animal.", "1")
    pair = {"sentence1": "A man eats a hot dog.", "sentence2": "A woman eats a pizza."}  # food, not an animal
    assert controls.kinds_in(pair["sentence1"], "animal") == (set(), False)
    assert controls.kinds_in(pair["sentence1"], "food") == ({"hotdog"}, True)
    # a puppy is an animal the lists know but do not compare: no kind control, and no animal condition either
    pair = {"sentence1": "A puppy chews a shoe.", "sentence2": "A dog chews a bone."}
    assert controls._rows("kind", pair, [], conditions, rng) is None
    for _ in range(20):
        absent = conditions.absent(f"{pair['sentence1']} {pair['sentence2']}", rng)
        assert controls.condition_category(absent)[0] != "animal"
    # the number of people, where each caption counts them once
    pair = {"sentence1": "A man rides a horse down a road.", "sentence2": "Two women ride horses down a road."}
    assert controls.people_count(pair["sentence1"]) == 1 and controls.people_count(pair["sentence2"]) == 2
    assert controls.people_count("A man and a woman walk.") is None and controls.people_count("Men at work.") is None
    counted = controls.Conditions([{"condition": "The number of people.", "sentence1": "x", "sentence2": "y"}])
    found = {tuple(controls._rows("kind", pair, [], counted, np.random.default_rng(s))[0][2:]) for s in range(20)}
    assert found == {("The number of people.", "1"), ("The type of animal.", "5")}
    # conditions that count are never a not-pertinent control's: two captions without people agree there are none
    assert (
        controls.Conditions([{"condition": "The number of people.", "sentence1": "x", "sentence2": "y"}]).about[
            "people"
        ]
        == []
    )
