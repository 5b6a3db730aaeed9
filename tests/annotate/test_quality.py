"""Label quality: the ordinal rater model on simulated crowds (against the mean and the median), a case small
enough to check by hand, the crowd-kit verdict, the workers table and the high-against-low check through the
ratings import."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from scipy.stats import spearmanr

from csts_pipeline.pipeline.schemas import WORKERS_SCHEMA
from csts_pipeline.stages.annotate.aggregation import thresholds
from csts_pipeline.stages.annotate.aggregation.aggregators import Mean, Median
from csts_pipeline.stages.annotate.aggregation.em import em_answers, kernel, ordinal
from csts_pipeline.stages.annotate.aggregation.em.interval import credible_interval
from csts_pipeline.stages.annotate.labels import verdict
from csts_pipeline.testing.simulate import KINDS, simulate_crowd

# the fixtures `kept`, `kept_dir` and `rated` come with the helpers
from tests.annotate.test_annotate import cli, kept, kept_dir, rated, read_tasks, write_results  # noqa: F401

SEEDS = (0, 1, 2)


def model_and_baselines(seed: int, per_item: int = 3) -> dict[str, float]:
    """Spearman with the truth of the model's, the mean's and the median's labels, and the model's fit."""
    crowd = simulate_crowd(per_item=per_item, seed=seed)
    r = crowd.ratings
    ok = r.rated
    fit = ordinal.fit(r.item[ok], r.worker[ok], r.rating[ok], crowd.n_items)
    mean = Mean.item_label(r.item[ok], r.rating[ok], crowd.n_items)
    median = Median.item_label(r.item[ok], r.rating[ok], crowd.n_items)
    has = np.bincount(r.item[ok], minlength=crowd.n_items) > 0

    def rho(label: np.ndarray) -> float:
        return float(spearmanr(label[has], crowd.truth[has]).statistic)

    return {"model": rho(fit.label), "mean": rho(mean), "median": rho(median), "fit": fit, "crowd": crowd}


def test_the_simulated_crowd_has_every_kind_and_a_fifth_of_spammers():
    crowd = simulate_crowd(seed=0)
    shares = {kind: len(crowd.workers_of(kind)) / len(crowd.kind) for kind in KINDS}
    assert shares["spammer"] >= 0.2 and shares["lenient"] > 0 and shares["harsh"] > 0 and shares["careful"] > 0.3
    r = crowd.ratings
    assert np.bincount(r.item).tolist() == [3] * crowd.n_items
    for kind, shift in (("lenient", 1), ("harsh", -1)):
        mine = np.isin(r.worker, crowd.workers_of(kind)) & r.rated
        inner = mine & np.isin(crowd.truth[r.item], [2, 3, 4])  # away from the clipped ends
        assert np.mean(r.rating[inner] - crowd.truth[r.item[inner]]) == pytest.approx(shift, abs=0.2)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_model_beats_mean_and_median_in_spearman_with_the_truth(seed: int):
    found = model_and_baselines(seed)
    assert found["model"] > found["mean"] + 0.05 and found["model"] > found["median"] + 0.05, found


def test_spammers_get_a_reliability_below_the_threshold_and_the_others_above():
    found = model_and_baselines(0)
    fit, crowd = found["fit"], found["crowd"]
    reliability = dict(zip(fit.workers, fit.reliability))
    bias = dict(zip(fit.workers, fit.bias))
    for worker, kind in crowd.kind.items():
        if kind == "spammer":
            assert reliability[worker] < thresholds.UNRELIABLE_BELOW, (worker, reliability[worker])
        else:
            assert reliability[worker] > thresholds.UNRELIABLE_BELOW + 0.2, (worker, kind, reliability[worker])
            assert bias[worker] == pytest.approx({"careful": 0, "lenient": 1, "harsh": -1}[kind], abs=0.45)


def test_90_percent_intervals_cover_the_truth_on_85_to_95_percent_of_items():
    covered, total = 0, 0
    for seed in SEEDS:
        found = model_and_baselines(seed)
        fit, crowd = found["fit"], found["crowd"]
        low, high = fit.interval()
        covered += int(((low <= crowd.truth) & (crowd.truth <= high)).sum())
        total += crowd.n_items
    assert 0.85 <= covered / total <= 0.95, covered / total
    # and the interval says something: narrower than the whole scale on most items
    assert np.mean(high - low) < 2


# ------------------------------------------------------------------------------------------- by hand


def test_response_and_posterior_on_a_case_checked_by_hand():
    # P(y | t=3) for bias 0, noise 1: exp(-(y-3)^2/2) normalised over y = 1..5
    weights = [math.exp(-((y - 3) ** 2) / 2) for y in range(1, 6)]
    expected = [w / sum(weights) for w in weights]
    assert kernel.response(np.array(0.0), np.array(1.0))[2] == pytest.approx(expected)

    # one item rated 4 by a worker (bias 0, noise 1) and 5 by a lenient one (bias +1, noise 1), uniform prior:
    # posterior(t) is proportional to P(4 | t, 0, 1) * P(5 | t, +1, 1)
    def p(y: int, t: int, b: float) -> float:
        terms = [math.exp(-((k - t - b) ** 2) / 2) for k in range(1, 6)]
        return math.exp(-((y - t - b) ** 2) / 2) / sum(terms)

    unnormalised = [p(4, t, 0.0) * p(5, t, 1.0) for t in range(1, 6)]
    by_hand = [u / sum(unnormalised) for u in unnormalised]
    table = kernel.response(np.array([0.0, 1.0]), np.array([1.0, 1.0]))
    answers = em_answers.answer_matrix(np.array([4.0, 5.0]), None)
    posterior = ordinal.item_posterior(np.array([0, 0]), np.array([0, 1]), answers, table, np.full(5, 0.2), 1)
    assert posterior[0] == pytest.approx(by_hand)
    # 4 and 5 nearly tie: the lenient worker's 5 fits a true 4 (4 + 1) and a true 5 (the top clips the shift)
    assert posterior[0][3] + posterior[0][4] > 0.85
    # the interval: mode 4 and its neighbours until the mass is nearest 0.9
    low, high = credible_interval(np.array([[0.0, 0.02, 0.1, 0.8, 0.08]]), 0.9)
    assert (low[0], high[0]) == (3, 4)  # 0.9 exactly; 3..5 would hold 0.98
    # reliability: a worker who always answers the truth has 1, uniform answers 0
    assert kernel.reliability(np.eye(5)) == pytest.approx(1.0)
    assert kernel.reliability(np.full((5, 5), 0.2)) == pytest.approx(0.0, abs=1e-9)


def test_the_fit_recovers_a_harsh_worker_on_a_tiny_crowd():
    # 30 items with truth 2..4 (no clipping); A and B answer the truth, H one point less
    truth = np.tile([2, 3, 4], 10)
    item = np.repeat(np.arange(30), 3)
    worker = np.tile(["A", "B", "H"], 30)
    rating = np.stack([truth, truth, truth - 1], axis=1).reshape(-1)
    fit = ordinal.fit(item, worker, rating, 30)
    bias = dict(zip(fit.workers, fit.bias))
    assert bias["H"] == pytest.approx(-1.0, abs=0.15) and abs(bias["A"]) < 0.15
    assert np.array_equal(np.argmax(fit.posterior, axis=1) + 1, truth)
    assert fit.converged


# ---------------------------------------------------------------------------------------- the verdict


@pytest.mark.slow
def test_the_verdict_model_finds_bad_conditions_better_than_the_share_of_flags():
    hits_model, hits_share = 0, 0
    for seed in SEEDS:
        crowd = simulate_crowd(seed=seed)
        r = crowd.ratings
        model = verdict.infer(r.item, r.worker, r.flagged, crowd.n_items).p_flag > 0.5
        share = verdict.share_of_flags(r.item, r.flagged, crowd.n_items) > 0.5
        hits_model += int((model == crowd.bad).sum())
        hits_share += int((share == crowd.bad).sum())
    assert hits_model > hits_share


@pytest.mark.parametrize("seed, every", [(0, False), (1, False), (2, True)])
def test_the_verdict_is_crowd_kits_dawid_skene_to_float_noise(seed: int, every: bool):
    """verdict.dawid_skene replays crowd-kit's DawidSkene(n_iter=100) in arrays: the same P(not pertinent) and
    balanced skills (an item nobody answered stays nan; `every`: a crowd whose every answer is a flag)."""
    import pandas as pd
    from crowdkit.aggregation import DawidSkene

    r = simulate_crowd(n_items=600, n_workers=30, seed=seed).ratings
    flagged = np.ones(len(r.item), bool) if every else r.flagged
    votes = pd.DataFrame({"task": r.item, "worker": r.worker.astype(str)})
    votes["label"] = np.where(flagged, verdict.FLAG, verdict.OK)
    theirs = DawidSkene(n_iter=100).fit(votes)
    ours = verdict.dawid_skene(r.item, r.worker, flagged, 602)
    expected = np.full(602, np.nan)
    expected[theirs.probas_.index.to_numpy()] = theirs.probas_[verdict.FLAG].to_numpy()
    assert np.isnan(ours.p_flag[600:]).all()
    np.testing.assert_allclose(ours.p_flag[:600], expected[:600], rtol=0, atol=1e-9)
    np.testing.assert_allclose(ours.skill, verdict.balanced_skill(theirs.errors_, ours.workers), rtol=0, atol=1e-9)


# -------------------------------------------------------------------------------- through the import


def crowd_rows(
    items: list[dict], seed: int = 0, per_item: int = 5
) -> tuple[list[dict], dict[str, int], dict[str, str]]:
    """A simulated crowd's answers to the exported items (5 each: some 60 per worker, enough to tell a spammer),
    as results rows; the truth and the kinds."""
    crowd = simulate_crowd(n_items=len(items), per_item=per_item, seed=seed)
    # the simulator's items are pairs (high, low); map them onto the tasks' pairs
    by_pair: dict[int, dict[str, int]] = {}
    for index, task in enumerate(items):
        by_pair.setdefault(task["pair_id"], {})[task["condition_type"]] = index
    order = [pair[kind] for pair in by_pair.values() for kind in ("high", "low")]
    r = crowd.ratings
    rows = [
        {
            "item_id": items[order[i]]["item_id"],
            "worker_id": str(w),
            "assignment_id": f"A-{n}",
            "rating": "" if flagged else int(value),
            "not_pertinent": "true" if flagged else "false",
        }
        for n, (i, w, value, flagged) in enumerate(zip(r.item, r.worker, r.rating, r.flagged))
    ]
    truth = {items[order[i]]["item_id"]: int(t) for i, t in enumerate(crowd.truth)}
    return rows, truth, crowd.kind


def test_import_with_the_model_writes_distributions_workers_and_inversions(tmp_path: Path, rated: Path):  # noqa: F811
    items = read_tasks(rated / "ratings_tasks")
    rows, truth, kinds = crowd_rows(items)
    results = write_results(tmp_path / "crowd.csv", rows)
    output = cli(
        "annotate", "import", "--stage", "ratings", "--out", rated, "--results", results, "--aggregate", "model"
    )
    assert "(labels: model)" in output and "ordinal model: 20 workers, 5 unreliable (reliability below 0.5)" in output
    table = pq.read_table(rated / "ratings" / "items.parquet").to_pylist()
    answered = [row for row in table if row["ratings"] > 0]
    for row in answered:
        assert sum(row["distribution"]) == pytest.approx(1.0, abs=1e-5)
        mode = int(np.argmax(row["distribution"])) + 1
        assert row["interval_low"] <= mode <= row["interval_high"]
        # the label is the posterior mean on the crowd's scale; the distribution is over the true label
        assert abs(row["label"] - np.dot(row["distribution"], [1, 2, 3, 4, 5])) < 0.5
        assert 0 <= row["p_not_pertinent"] <= 1
    rho = spearmanr([r["label"] for r in answered], [truth[r["item_id"]] for r in answered]).statistic
    workers = pq.read_table(rated / "ratings" / "workers.parquet")
    assert workers.schema == WORKERS_SCHEMA and workers.num_rows == 20
    for w in workers.to_pylist():
        assert w["unreliable"] == (kinds[w["worker_id"]] == "spammer") and w["gold_accuracy"] is None
    # the mean on the same answers follows the truth less well, and leaves the model columns null
    cli("annotate", "import", "--stage", "ratings", "--out", rated, "--results", results, "--aggregate", "mean")
    mean_rows = [r for r in pq.read_table(rated / "ratings" / "items.parquet").to_pylist() if r["ratings"] > 0]
    assert all(r["distribution"] is None and r["interval_low"] is None for r in mean_rows)
    mean_rho = spearmanr([r["label"] for r in mean_rows], [truth[r["item_id"]] for r in mean_rows]).statistic
    assert rho > mean_rho + 0.03, (rho, mean_rho)
    assert pq.read_table(rated / "ratings" / "workers.parquet").column("reliability").null_count == 20


def test_inversions_list_pairs_whose_high_label_is_not_above_the_low_one(tmp_path: Path, rated: Path):  # noqa: F811
    items = read_tasks(rated / "ratings_tasks")
    rows, _, _ = crowd_rows(items, seed=4)
    # make one pair plainly inverted: its high condition rated 1 and its low condition 5 by everyone
    pair = items[0]["pair_id"]
    ids = {t["condition_type"]: t["item_id"] for t in items if t["pair_id"] == pair}
    for row in rows:
        if row["item_id"] in ids.values():
            row["not_pertinent"], row["rating"] = "false", 1 if row["item_id"] == ids["high"] else 5
    results = write_results(tmp_path / "crowd.csv", rows)
    for how in ("model", "mean"):
        output = cli(
            "annotate", "import", "--stage", "ratings", "--out", rated, "--results", results, "--aggregate", how
        )
        with (rated / "ratings" / "inversions.csv").open(newline="") as handle:
            listed = list(csv.DictReader(handle))
        found = json.loads((rated / "ratings" / "agreement.json").read_text())["high_low"]
        inverted = [r for r in listed if r["problem"] == "inverted"]
        assert {r["item_id_high"] for r in inverted} >= {ids["high"]}
        assert found["inverted"] == len(inverted) and found["inverted"] + found["unsure"] == len(listed)
        assert found["rate"] == pytest.approx(len(listed) / found["pairs"], abs=1e-4)
        assert f"high vs low: {found['inverted']} of {found['pairs']} pairs inverted" in output
        # the check is independent: every listed pair's labels as items.parquet has them
        labels = {r["item_id"]: r["label"] for r in pq.read_table(rated / "ratings" / "items.parquet").to_pylist()}
        for r in inverted:
            assert labels[r["item_id_high"]] <= labels[r["item_id_low"]]
        if how == "model":
            assert found["unsure"] > 0 and all(float(r["p_high_above_low"]) < 0.9 for r in listed)
        else:
            assert found["unsure"] == 0 and found["unsure_below"] is None


# ------------------------------------------------------------------------------------------- publishing


def test_the_hf_export_carries_pseudonymous_ratings_distributions_and_the_quality_card(
    tmp_path: Path,
    rated: Path,  # noqa: F811
):
    items = read_tasks(rated / "ratings_tasks")
    rows, _, _ = crowd_rows(items)
    results = write_results(tmp_path / "crowd.csv", rows)
    cli("annotate", "import", "--stage", "ratings", "--out", rated, "--results", results, "--aggregate", "model")
    cli("annotate", "split", "--out", rated)
    out = tmp_path / "hf"
    cli("export", "--annotate", rated, "--format", "hf", "--out", out)
    published = pq.read_table(out / "annotations" / "ratings.parquet").to_pylist()
    split_items = set()
    for split in ("train", "validation", "test"):
        for row in pq.read_table(rated / "csts" / f"{split}.parquet").to_pylist():
            split_items.add(f"r-{row['pair_id']:016x}-{row['condition_type']}")
    assert {r["item_id"] for r in published} == split_items
    raw = [r for r in rows if r["item_id"] in split_items]
    assert len(published) == len(raw)
    # one pseudonym per worker, never the worker id itself, the same worker's ratings under one name
    by_worker: dict[str, set] = {}
    for r in raw:
        by_worker.setdefault(r["worker_id"], set()).add((r["item_id"], r["rating"] if r["rating"] != "" else None))
    by_pseudonym: dict[str, set] = {}
    for r in published:
        assert r["worker"].startswith("w-") and r["worker"] not in by_worker
        by_pseudonym.setdefault(r["worker"], set()).add((r["item_id"], r["rating"]))
    assert sorted(map(sorted, by_pseudonym.values())) == sorted(map(sorted, by_worker.values()))
    distributions = pq.read_table(out / "annotations" / "distributions.parquet")
    assert set(distributions.column("item_id").to_pylist()) == split_items
    card = (out / "README.md").read_text()
    assert "ordinal rater model" in card and "an inversion rate of" in card
    assert "Gold accuracy: not measured" in card and "annotations/ratings.parquet" in card
    assert "The rater model's shared per-item shift sd " in card and "points, chosen from the answers." in card
    # the same salt gives the same pseudonyms; a new salt (another dataset) other ones
    cli("export", "--annotate", rated, "--format", "hf", "--out", out, "--force")
    assert pq.read_table(out / "annotations" / "ratings.parquet").to_pylist() == published
    (rated / "publish_salt.txt").unlink()
    cli("export", "--annotate", rated, "--format", "hf", "--out", out, "--force")
    again = pq.read_table(out / "annotations" / "ratings.parquet").column("worker").to_pylist()
    assert set(again).isdisjoint(r["worker"] for r in published)


def test_the_model_with_no_ratings_or_one_rating():
    from csts_pipeline.stages.annotate.aggregation.quality import model_labels, workers_table
    from csts_pipeline.stages.annotate.labels.agreement import RatingArrays

    flagged = RatingArrays(np.array([0, 1]), np.array(["a", "b"]), np.zeros(2), np.array([True, True]))
    labels, model = model_labels(flagged, 3, not_pertinent_share=0.5, min_ratings=1)
    assert labels.status.tolist() == ["not_pertinent", "not_pertinent", "unanswered"] and np.isnan(labels.label).all()
    assert workers_table(model, flagged).column("reliability").null_count == 2
    single = RatingArrays(np.array([0]), np.array(["a"]), np.array([4.0]), np.array([False]))
    labels, model = model_labels(single, 2, not_pertinent_share=0.5, min_ratings=1)
    assert labels.status.tolist() == ["kept", "unanswered"] and 3.5 < labels.label[0] < 4.5
    assert model.low[0] <= 4 <= model.high[0]
