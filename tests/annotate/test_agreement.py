"""Likert agreement beyond Fleiss' kappa: Krippendorff's alpha against the textbook and an independent
implementation, the label policies (mean, median, round), the paper's 100-item sample protocol and the
per-worker flags."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from csts_pipeline.stages.annotate.labels.agreement import (
    FLAG_BELOW,
    RatingArrays,
    agreement_summary,
    grouped_spearman,
    krippendorff_alpha,
    worker_agreement,
)
from csts_pipeline.stages.annotate.steps import csts_split
from csts_pipeline.stages.annotate.steps.options import RatingsImportOptions
from csts_pipeline.stages.annotate.steps.ratings import import_ratings

# the fixtures `kept`, `kept_dir` and `rated` come with the helpers
from tests.annotate.test_annotate import cli, kept, kept_dir, rated, read_tasks, simulated_ratings, write_results  # noqa: F401

NAN = np.nan
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", the example with missing values: 4 coders
# (rows) x 12 units; alpha is 0.743 nominal, 0.815 ordinal, 0.849 interval.
TEXTBOOK = np.array(
    [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
        [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
    ]
)
VALUES = np.arange(1, 6)


def counts_of(data: np.ndarray) -> np.ndarray:
    """coders x units with nan for missing -> counts[unit, value]."""
    return np.stack([(data == v).sum(axis=0) for v in VALUES], axis=1)


def reference_alpha(data: np.ndarray, metric: str) -> float:
    """Alpha by its definition over pairable values, with plain loops: every ordered pair of values of two
    coders in a unit contributes delta^2 / (m_u - 1) to the observed disagreement; the expected one pairs every
    two pairable values of the whole data."""
    units = [[v for v in data[:, u] if not np.isnan(v)] for u in range(data.shape[1])]
    units = [u for u in units if len(u) >= 2]
    pooled = [v for u in units for v in u]
    n = len(pooled)
    margin = {c: pooled.count(c) for c in set(pooled)}

    def delta(c: float, k: float) -> float:
        if metric == "nominal":
            return float(c != k)
        if metric == "interval":
            return (c - k) ** 2
        low, high = min(c, k), max(c, k)
        return (sum(m for g, m in margin.items() if low <= g <= high) - (margin[c] + margin[k]) / 2) ** 2

    observed = sum(
        delta(a, b) / (len(u) - 1) for u in units for i, a in enumerate(u) for j, b in enumerate(u) if i != j
    )
    expected = sum(delta(a, b) for a, b in itertools.permutations(pooled, 2))
    return 1 - (n - 1) * observed / expected


@pytest.mark.parametrize(("metric", "value"), [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849)])
def test_alpha_matches_the_textbook_example(metric: str, value: float):
    assert krippendorff_alpha(counts_of(TEXTBOOK), VALUES, metric) == pytest.approx(value, abs=5e-4)
    assert reference_alpha(TEXTBOOK, metric) == pytest.approx(value, abs=5e-4)


def random_ratings(seed: int, coders: int = 5, units: int = 200, missing: float = 0.4) -> np.ndarray:
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 6, units)
    data = np.clip(truth[None, :] + rng.integers(-1, 2, (coders, units)), 1, 5).astype(float)
    data[rng.random(data.shape) < missing] = np.nan
    return data


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("metric", ["nominal", "ordinal", "interval"])
def test_alpha_agrees_with_the_reference_on_random_data(seed: int, metric: str):
    data = random_ratings(seed, units=60)
    assert krippendorff_alpha(counts_of(data), VALUES, metric) == pytest.approx(reference_alpha(data, metric))


# the `krippendorff` package (0.9.0) on random_ratings(0) given as coders x units, alpha(reliability_data=data,
# level_of_measurement=metric, value_domain=[1, 2, 3, 4, 5]): the counts path agrees with the raw-data path
PACKAGE_FIGURES = {"nominal": 0.339581, "ordinal": 0.788515, "interval": 0.789103}


@pytest.mark.parametrize("metric", ["nominal", "ordinal", "interval"])
def test_alpha_agrees_with_the_krippendorff_package(metric: str):
    data = random_ratings(0)
    assert krippendorff_alpha(counts_of(data), VALUES, metric) == pytest.approx(PACKAGE_FIGURES[metric], abs=1e-6)


def test_alpha_is_nan_without_variation_or_pairs():
    assert np.isnan(krippendorff_alpha(np.array([[3, 0, 0, 0, 0], [2, 0, 0, 0, 0]]), VALUES, "ordinal"))
    assert np.isnan(krippendorff_alpha(np.array([[1, 0, 0, 0, 0]]), VALUES, "interval"))


def test_round_policy_flows_to_integer_labels_and_is_recorded(tmp_path: Path, rated: Path):  # noqa: F811
    rows, _, _ = simulated_ratings(read_tasks(rated / "ratings_tasks"))
    results = write_results(tmp_path / "r.csv", rows)
    record = import_ratings(rated, [results], RatingsImportOptions(aggregate="round"), force=True)
    assert record["label_policy"] == "round" and record["params"]["aggregate"] == "round"
    assert json.loads((rated / "ratings" / "agreement.json").read_text())["label_policy"] == "round"
    labels = pq.read_table(rated / "ratings" / "items.parquet").column("label").drop_null().to_numpy()
    assert set(labels) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    csts_split.split(rated)
    table = pq.read_table(rated / "csts" / "train.parquet")
    assert table.schema.metadata[b"csts.label_range"] == b"1 5"
    described = json.loads(table.schema.metadata[b"csts.labels"])
    assert described["source"] == "likert" and described["policy"] == "round"
    assert set(table.column("label").to_numpy()) <= {1.0, 2.0, 3.0, 4.0, 5.0}


# ------------------------------------------------------------------------------------------ sample protocol


def simulated_arrays(n_items: int = 300, seed: int = 0) -> RatingArrays:
    """n items, 2 to 5 ratings each from good raters (noise 0.6 around a hidden truth) and a spammer S."""
    rng = np.random.default_rng(seed)
    truth = rng.uniform(1, 5, n_items)
    item, worker, rating = [], [], []
    for i in range(n_items):
        for w in rng.choice(["A", "B", "C", "D", "S"], size=int(rng.integers(2, 6)), replace=False):
            value = rng.integers(1, 6) if w == "S" else np.clip(np.rint(truth[i] + rng.normal(0, 0.6)), 1, 5)
            item.append(i)
            worker.append(w)
            rating.append(float(value))
    return RatingArrays(np.array(item), np.array(worker), np.array(rating), np.zeros(len(item), bool))


def test_the_sample_protocol_takes_100_items_with_three_ratings_each():
    ratings = simulated_arrays()
    status = np.full(300, "kept", dtype=object)
    status[:20] = "not_pertinent"  # never sampled
    summary = agreement_summary(ratings, status, sample=100, seed=1)
    sample = summary["sample"]
    assert sample["items"] == 100 and sample["ratings"] == 300 and sample["ratings_per_item"] == {"3": 100}
    per_item = np.bincount(ratings.item)
    assert sample["eligible_items"] == int((per_item[20:] >= 3).sum())
    assert sample == agreement_summary(ratings, status, sample=100, seed=1)["sample"]
    assert sample != agreement_summary(ratings, status, sample=100, seed=2)["sample"]
    for name in ("fleiss_kappa", "alpha_ordinal", "alpha_interval"):
        assert -1 < sample[name] < 1 and abs(sample[name] - summary[name]) < 0.15
    assert summary["alpha_ordinal"] > summary["fleiss_kappa"]  # near misses count as near agreement
    # asking for more than there are takes every eligible item
    assert agreement_summary(ratings, status, sample=10_000, seed=1)["sample"]["items"] == sample["eligible_items"]


def test_the_sample_option_on_the_command_line(tmp_path: Path, rated: Path):  # noqa: F811
    rows, _, _ = simulated_ratings(read_tasks(rated / "ratings_tasks"), ratings_per_item=3)
    results = write_results(tmp_path / "r.csv", rows)
    output = cli("annotate", "import", "--stage", "ratings", "--out", rated, "--results", results, "--force")
    assert "sample of" not in output
    args = ["annotate", "import", "--stage", "ratings", "--out", rated, "--results", results]
    output = cli(*args, "--agreement-sample", 100, "--seed", 3, "--label-policy", "median")
    line = output.splitlines()[3]
    assert line.startswith("sample of 100 items (asked 100, seed 3), 3 ratings each: Fleiss' kappa 0.")
    agreement = json.loads((rated / "ratings" / "agreement.json").read_text())
    assert agreement["sample"]["items"] == 100 and agreement["label_policy"] == "median"


# --------------------------------------------------------------------------------------------- worker flags


def test_grouped_spearman_is_scipys_per_group_with_ties_and_nothing():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    group = rng.integers(0, 40, 2000)
    x, y = rng.integers(1, 6, 2000).astype(float), rng.normal(size=2000).round(1)
    rho = grouped_spearman(group, x, y, 41)
    expected = [spearmanr(x[group == g], y[group == g]).statistic for g in range(40)]
    np.testing.assert_allclose(rho[:40], expected, rtol=0, atol=1e-12)
    assert np.isnan(rho[40])  # a group without values
    assert len(grouped_spearman(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), 0)) == 0
    assert worker_agreement(np.arange(3), np.array(["A", "B", "C"]), np.ones(3)) == []  # no item shared


def test_workers_below_the_threshold_are_flagged():
    ratings = simulated_arrays(seed=3)
    rows = {w["worker_id"]: w for w in worker_agreement(ratings.item, ratings.worker, ratings.rating)}
    assert rows["S"]["flagged"] and rows["S"]["spearman"] < FLAG_BELOW
    assert not any(rows[w]["flagged"] for w in "ABCD")
    assert all(rows[w]["spearman"] > 0.5 for w in "ABCD")  # the others' mean includes the spammer
