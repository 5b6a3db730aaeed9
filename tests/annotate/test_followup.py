"""`annotate export --stage ratings --more`: on simulated crowds the follow-up rounds reach the Spearman of a fixed
redundancy with at least 20% fewer ratings; on the command line the batch holds the uncertain items, excludes
the unreliable workers, and the next import merges it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import spearmanr

from csts_pipeline.stages.annotate.aggregation.em import ordinal, shift
from csts_pipeline.stages.annotate.steps import followup
from csts_pipeline.testing.simulate import Crowd, follow_up_rounds, simulate_crowd

# the fixtures `kept`, `kept_dir` and `rated` come with the helpers
from tests.annotate.test_annotate import cli, cli_error, kept, kept_dir, rated, read_tasks, write_results  # noqa: F401
from tests.annotate.test_quality import crowd_rows

FIXED = 5  # the fixed redundancy to beat
START = 2  # ratings per item before the follow-up rounds
ROUNDS = 4
SEEDS = range(6)  # six crowds of 400 items: the mean Spearman varies by about 0.005 from one set of seeds to another


def model_rho(crowd: Crowd) -> tuple[float, ordinal.OrdinalFit]:
    r = crowd.ratings
    ok = r.rated
    fit = ordinal.fit(r.item[ok], r.worker[ok], r.rating[ok], crowd.n_items)
    has = np.bincount(r.item[ok], minlength=crowd.n_items) > 0
    return float(spearmanr(np.where(has, fit.label, 3.0), crowd.truth).statistic), fit


def test_follow_ups_match_a_fixed_redundancy_with_a_fifth_fewer_ratings():
    fixed_rho, adaptive_rho, fixed_n, adaptive_n = [], [], 0, 0
    for seed in SEEDS:
        fixed = simulate_crowd(per_item=FIXED, seed=seed)
        fixed_rho.append(model_rho(fixed)[0])
        fixed_n += len(fixed.ratings.item)
        grown = follow_up_rounds(START, ROUNDS, seed)
        adaptive_rho.append(model_rho(grown)[0])
        adaptive_n += len(grown.ratings.item)
    assert adaptive_n <= 0.8 * fixed_n, adaptive_n / fixed_n
    assert np.mean(adaptive_rho) >= np.mean(fixed_rho) - 0.005, (adaptive_rho, fixed_rho)
    # the rounds matter: the START ratings alone fall short
    assert np.mean([model_rho(simulate_crowd(per_item=START, seed=s))[0] for s in SEEDS]) < np.mean(fixed_rho) - 0.03


def test_the_disagreement_rule_without_the_model():
    item = np.array([0, 0, 1, 1, 2, 3, 3])
    rating = np.array([2, 4, 3, 4, 5, 1, 1], float)
    status = np.array(["kept", "kept", "kept", "not_pertinent", "kept"], dtype=object)
    answers = np.array([2, 2, 1, 2, 0])
    assert followup.disagreeing(item, rating, answers, status).tolist() == [True, False, True, False, True]


def test_export_more_then_import_merges_the_follow_up(tmp_path: Path, rated: Path):  # noqa: F811
    items = read_tasks(rated / "ratings_tasks")
    rows, _, kinds = crowd_rows(items, per_item=5)
    first = write_results(tmp_path / "first.csv", rows)
    cli("annotate", "import", "--stage", "ratings", "--out", rated, "--results", first, "--aggregate", "model")
    output = cli("annotate", "export", "--stage", "ratings", "--more", "--out", rated)
    assert "items need more ratings (posterior sd above 0.5" in output
    table = pq.read_table(rated / "ratings" / "items.parquet").to_pylist()
    wide = {
        r["item_id"]
        for r in table
        if r["status"] == "kept" and followup.posterior_sd(np.array(r["distribution"])) > followup.MORE_ABOVE_SD
    }
    with (rated / "ratings_more" / "hits.csv").open(newline="") as handle:
        asked = [row["item_id"] for row in csv.DictReader(handle)]
    assert set(asked) == wide and len(asked) < len(items)
    with (rated / "ratings_more" / "exclude_workers.csv").open(newline="") as handle:
        excluded = {row["worker_id"] for row in csv.DictReader(handle)}
    assert excluded == {w for w, k in kinds.items() if k == "spammer"}
    assert cli("annotate", "export", "--stage", "ratings", "--more", "--out", rated).startswith("up to date")
    # a careful worker who has not rated them answers the follow-up; the next import takes both batches
    by_item = {}
    for row in rows:
        by_item.setdefault(row["item_id"], set()).add(row["worker_id"])
    careful = [w for w, k in kinds.items() if k == "careful"]
    extra = []
    for n, item_id in enumerate(asked):
        worker = next(w for w in careful if w not in by_item[item_id])
        extra.append({"item_id": item_id, "worker_id": worker, "assignment_id": f"M-{n}", "rating": 3})
    more = write_results(tmp_path / "more.csv", extra)
    args = ["annotate", "import", "--stage", "ratings", "--out", rated, "--aggregate", "model"]
    cli(*args, "--results", first, "--results", more)
    merged = {r["item_id"]: r for r in pq.read_table(rated / "ratings" / "items.parquet").to_pylist()}
    before = {r["item_id"]: r for r in table}
    for item_id in asked:
        assert merged[item_id]["answers"] == before[item_id]["answers"] + 1
    untouched = [i for i in before if i not in set(asked)]
    assert all(merged[i]["answers"] == before[i]["answers"] for i in untouched)


def test_the_import_takes_the_shared_shift_the_user_sets(tmp_path: Path, rated: Path):  # noqa: F811
    """`annotate import --ambiguity-sd`: the rater model assumes the spread the user gives (agreement.json says
    which), a wider one widens the posteriors and the intervals; nonsense is a one-line error."""
    items = read_tasks(rated / "ratings_tasks")
    rows, _, _ = crowd_rows(items, per_item=4)
    results = write_results(tmp_path / "results.csv", rows)
    args = ["annotate", "import", "--stage", "ratings", "--out", rated, "--results", results, "--aggregate", "model"]
    found = {}
    for spread in ("0", "0.6", None):
        said = cli(*args, *(("--ambiguity-sd", spread) if spread else ()))
        where = "chosen from the answers" if spread is None else "set by --ambiguity-sd"
        assert f"shared per-item shift sd {float(spread or 0):.2f} points, {where}" in said or spread is None
        assert where in said
        agreement = json.loads((rated / "ratings" / "agreement.json").read_text())
        table = pq.read_table(rated / "ratings" / "items.parquet").to_pylist()
        labelled = [r for r in table if r["status"] == "kept"]
        found[spread] = {
            "sd": agreement["model_workers"]["ambiguity_sd"],
            "width": np.mean([r["interval_high"] - r["interval_low"] for r in labelled]),
            "spread": np.mean([followup.posterior_sd(np.array(r["distribution"])) for r in labelled]),
        }
    assert found["0"]["sd"] == 0.0 and found["0.6"]["sd"] == 0.6
    assert found[None]["sd"] in shift.AMBIGUITY_GRID  # unset: chosen from the answers
    assert found["0.6"]["spread"] > found["0"]["spread"] + 0.05 and found["0.6"]["width"] > found["0"]["width"]
    assert "--ambiguity-sd must be in [0, 2.0]" in cli_error(*args, "--ambiguity-sd", "-0.1")
    mean = [a if a != "model" else "mean" for a in args]
    assert "only with --aggregate model" in cli_error(*mean, "--ambiguity-sd", "0.3")
    assert "only for --stage ratings" in cli_error(
        "annotate", "import", "--stage", "bws", "--out", rated, "--results", results, "--ambiguity-sd", "0.3"
    )


def test_the_import_records_how_the_answers_weigh_each_spread(tmp_path: Path, rated: Path):  # noqa: F811
    """Where the shared shift's sd is chosen, agreement.json keeps the people's log-likelihood at each spread of
    the grid (less the best's) and the summary says how far apart they are; where `--ambiguity-sd` sets the sd
    there is neither. One rating an item says nothing of what an item's raters share: the spreads fit alike."""
    items = read_tasks(rated / "ratings_tasks")
    args = ["annotate", "import", "--stage", "ratings", "--out", rated, "--aggregate", "model"]
    span = {}
    for per_item in (1, 5):
        rows, _, _ = crowd_rows(items, per_item=per_item)
        results = write_results(tmp_path / f"results-{per_item}.csv", rows)
        said = cli(*args, "--results", results)
        profile = json.loads((rated / "ratings" / "agreement.json").read_text())["model_workers"][
            "ambiguity_sd_log_likelihood"
        ]
        assert [float(sd) for sd in profile] == list(shift.AMBIGUITY_GRID) and max(profile.values()) == 0, profile
        span[per_item] = -min(profile.values())
        assert f"log-likelihood spans {span[per_item]:.1f} over sd 0.00-0.60" in said, said
    assert span[1] < 2 < span[5], span  # five ratings an item tell the spreads apart, one hardly
    said = cli(*args, "--results", results, "--ambiguity-sd", "0.3")
    model = json.loads((rated / "ratings" / "agreement.json").read_text())["model_workers"]
    assert model["ambiguity_sd_log_likelihood"] is None and "log-likelihood spans" not in said
