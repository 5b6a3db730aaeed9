"""The harder simulated crowds and models (testing.simulate, testing.simulate_models) are what they say, and a
simulated model reaches the ratings import through `annotate rate` (testing.chosen_model), as the harder-crowds and
real-text benches use them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from scipy.stats import pearsonr

from csts_pipeline.stages.annotate.aggregation import weighing
from csts_pipeline.stages.annotate.aggregation.em import ordinal
from csts_pipeline.testing.chosen_model import rate_with
from csts_pipeline.testing.command_path import People, first_batch, import_model, prepare_folder
from csts_pipeline.testing.simulate import simulate_crowd
from csts_pipeline.testing.simulate_models import HARDER_KINDS, kind_items, model_answers, with_models


def people_error(crowd) -> np.ndarray:
    """Per item, the mean of the careful workers' ratings minus the truth (nan where none rated)."""
    r = crowd.ratings
    careful = np.array([crowd.kind[w] == "careful" for w in r.worker]) & r.rated
    total = np.bincount(
        r.item[careful], weights=r.rating[careful] - crowd.truth[r.item[careful]], minlength=crowd.n_items
    )
    count = np.bincount(r.item[careful], minlength=crowd.n_items)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def test_a_shared_ambiguity_correlates_everyones_errors_and_the_plain_crowd_is_unchanged():
    plain = simulate_crowd(per_item=5, seed=1)
    assert plain.shift is None and plain.scale is None
    assert np.array_equal(simulate_crowd(per_item=5, seed=1, ambiguity=0.0).ratings.rating, plain.ratings.rating)
    hard = simulate_crowd(per_item=5, seed=1, ambiguity=0.6, difficulty=0.3)
    assert np.array_equal(hard.truth, plain.truth)
    on = ~np.isnan(people_error(hard))
    # people's mean error follows the item's shift: more raters do not average it away
    assert pearsonr(people_error(hard)[on], hard.shift[on]).statistic > 0.5
    assert abs(pearsonr(people_error(plain)[on], hard.shift[on]).statistic) < 0.2
    q, _ = model_answers(hard, "correlated", 1)
    model_error = q @ np.arange(1, 6) - hard.truth
    assert pearsonr(model_error[on], people_error(hard)[on]).statistic > 0.3  # the model errs with the people


def test_the_harder_models_are_miscalibrated_or_wrong_as_described():
    crowd = simulate_crowd(n_items=2000, per_item=1, seed=2, ambiguity=0.4, difficulty=0.3)
    answers = {kind: model_answers(crowd, kind, 2)[0] for kind in HARDER_KINDS}
    hit = {kind: np.mean(np.argmax(q, 1) + 1 == crowd.truth) for kind, q in answers.items()}
    sure = {kind: np.mean(q.max(axis=1)) for kind, q in answers.items()}
    assert sure["overconfident"] > 0.98 and hit["overconfident"] < 0.6  # sure of answers right about half the time
    assert sure["correlated"] < 0.8 and hit["correlated"] > hit["overconfident"]
    wrong = kind_items(crowd.n_items, 2)
    assert 0.2 < wrong.mean() < 0.3
    assert (np.argmax(answers["kind_wrong"][wrong], 1) == 4).all()
    assert np.allclose(answers["kind_wrong"][~wrong], answers["correlated"][~wrong])
    assert (answers["sure_five"][:, 4] == 0.99).all()


@pytest.mark.slow
def test_a_simulated_model_enters_the_import_through_annotate_rate(tmp_path: Path):
    pairs = [(f"A dog runs in field {i}.", f"A cat sits on mat {i}.") for i in range(30)]
    folder = tmp_path / "annotate"
    items = prepare_folder(pairs, folder)
    crowd = simulate_crowd(n_items=len(items), per_item=1, seed=3, ambiguity=0.4)
    index = {item: 2 * pair + (kind == "low") for item, (pair, kind) in items.items()}
    q, p_flag = model_answers(crowd, "overconfident", 3)
    record = rate_with(folder, "overconfident", {item: (q[i], float(p_flag[i])) for item, i in index.items()})
    rows = {r["item_id"]: r for r in pq.read_table(record["files"]["ratings"]).to_pylist()}
    assert {r["worker_id"] for r in rows.values()} == {"model:overconfident"}
    assert all(np.allclose(rows[item]["distribution"], q[i], atol=1e-8) for item, i in index.items())
    assert all(abs(rows[item]["p_not_pertinent"] - p_flag[i]) < 1e-8 for item, i in index.items())
    people = People.around({item: float(crowd.truth[i]) for item, i in index.items()}, seed=3)
    import_model(folder, [first_batch(folder, people, 2, tmp_path / "r.csv", 3)])
    workers = {r["worker_id"] for r in pq.read_table(folder / "ratings" / "workers.parquet").to_pylist()}
    assert "model:overconfident" in workers


def shift_coverage(models: tuple, per_item: int, ambiguity: float | None) -> float:
    """Mean 90% coverage over three crowds whose raters all feel each item's shift (sd 0.4) and difficulty."""
    found = []
    for seed in (501, 502, 503):
        crowd = simulate_crowd(per_item=per_item, seed=seed, ambiguity=0.4, difficulty=0.3)
        rated = with_models(crowd, models, seed) if models else crowd
        fitted = weighing.anchored_fit(rated.ratings, crowd.n_items, None)
        if ambiguity is not None:
            fitted = ordinal_fit_at(rated, crowd.n_items, ambiguity)
        low, high = fitted.interval()
        found.append(float(np.mean((low <= crowd.truth) & (crowd.truth <= high))))
    return float(np.mean(found))


def ordinal_fit_at(rated, n_items: int, ambiguity: float):
    r = rated.ratings.subset(rated.ratings.rated)
    return ordinal.fit(r.item, r.worker, r.rating, n_items, soft=r.distribution, ambiguity=ambiguity)


@pytest.mark.parametrize("models", [(), ("correlated",), ("overconfident",)])
def test_the_shared_shift_widens_the_intervals_where_every_rater_shares_an_items_shift(models: tuple):
    """The rater model's shared shift (aggregation/em/shift.py) against the same model with its spread fixed at 0, on
    crowds where every rater of an item feels its shift: the intervals cover more at every number of ratings an
    item, most at five, where more ratings no longer average the shift away. It does not reach 0.85 everywhere
    (0.79-0.89 over these shapes, the harder-crowds bench): the spread is weakly identified from the
    answers and the prior keeps it small."""
    for per_item in (2, 3, 5):
        shared, plain = shift_coverage(models, per_item, None), shift_coverage(models, per_item, 0.0)
        assert shared > plain and shared >= 0.78, (models, per_item, shared, plain)
        if per_item == 5:  # each item's own interval: 0.861 against 0.842 with no models (0.03 under a shared one)
            assert shared >= plain + 0.015, (models, shared, plain)
