"""The aggregators as classes: each policy's `fit` gives the labels its `--aggregate` name gives, and the ordinal
model keeps its fit for the workers table and the intervals."""

from __future__ import annotations

import numpy as np
import pytest

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.labels.aggregators import (
    AGGREGATORS,
    Mean,
    Median,
    OrdinalModel,
    RoundedMedian,
    aggregator,
)
from csts_pipeline.stages.annotate.labels.agreement import RatingArrays


def _ratings() -> RatingArrays:
    item = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    rating = np.array([1, 2, 2, 4, 5, 3, 3, 0, 5], np.float64)
    flagged = rating == 0
    return RatingArrays(item, np.array(list("abcabcabd")), rating, flagged)


def test_plain_aggregators_give_mean_median_and_rounded_median():
    ratings = _ratings()
    assert Mean(0.5, 1).fit(ratings, 4).label[:3] == pytest.approx([5 / 3, 4.5, 11 / 3])
    assert Median(0.5, 1).fit(ratings, 4).label[:3] == pytest.approx([2.0, 4.5, 3.0])
    assert RoundedMedian(0.5, 1).fit(ratings, 4).label[:3] == pytest.approx([2.0, 5.0, 3.0])
    labels = Mean(0.5, 3).fit(ratings, 4)
    assert list(labels.status) == ["kept", "too_few_ratings", "kept", "unanswered"]
    assert np.isnan(labels.label[3])


def test_the_ordinal_model_keeps_its_fit_and_orders_items_by_their_ratings():
    ratings = _ratings()
    model = aggregator("model", 0.5, 1)
    assert isinstance(model, OrdinalModel) and model.result is None
    labels = model.fit(ratings, 4)
    assert model.result is not None and model.result.low.shape == (4,)
    assert labels.label[0] < labels.label[2] < labels.label[1]


def test_every_name_is_a_class_and_an_unknown_one_is_a_line():
    assert {name: kind.name for name, kind in AGGREGATORS.items()} == {
        n: n for n in ("mean", "median", "round", "model")
    }
    with pytest.raises(UserError, match="--aggregate must be mean, median, round, model"):
        aggregator("mode", 0.5, 1)
