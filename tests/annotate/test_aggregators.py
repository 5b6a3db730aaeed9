"""The aggregators as classes: each policy's `fit` gives the labels its `--aggregate` name gives, and the ordinal
model keeps its fit for the workers table and the intervals."""

from __future__ import annotations

import numpy as np
import pytest

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.aggregation.aggregators import (
    REGISTERED,
    Mean,
    Median,
    OrdinalModel,
    RoundedMedian,
    aggregator,
    aggregator_class,
    aggregator_help,
)
from csts_pipeline.stages.annotate.labels.agreement import RatingArrays
from csts_pipeline.stages.annotate.release.card import policy_sentence
from csts_pipeline.stages.annotate.steps.ratings import _check_rating_options


def _ratings() -> RatingArrays:
    item = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    rating = np.array([1, 2, 2, 4, 5, 3, 3, 0, 5], np.float64)
    flagged = rating == 0
    return RatingArrays(item, np.array(list("abcabcabd")), rating, flagged)


def test_each_policy_holds_its_own_maths():
    item = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3])
    rating = np.array([3, 4, 1, 2, 2, 4, 5, 5, 5, 2, 3], float)
    mean, median, rounded = (kind.item_label(item, rating, 5) for kind in (Mean, Median, RoundedMedian))
    assert np.allclose(mean[:4], [3.5, 5 / 3, 4.75, 2.5])
    assert median[:4].tolist() == [3.5, 2.0, 5.0, 2.5]
    assert rounded[:4].tolist() == [4.0, 2.0, 5.0, 3.0]  # halves go up
    assert np.isnan(mean[4]) and np.isnan(median[4]) and np.isnan(rounded[4])


def test_plain_aggregators_give_mean_median_and_rounded_median():
    ratings = _ratings()
    assert Mean(not_pertinent_share=0.5, min_ratings=1).fit_predict(ratings, 4).label[:3] == pytest.approx(
        [5 / 3, 4.5, 11 / 3]
    )
    assert Median(not_pertinent_share=0.5, min_ratings=1).fit_predict(ratings, 4).label[:3] == pytest.approx(
        [2.0, 4.5, 3.0]
    )
    assert RoundedMedian(not_pertinent_share=0.5, min_ratings=1).fit_predict(ratings, 4).label[:3] == pytest.approx(
        [2.0, 5.0, 3.0]
    )
    labels = Mean(min_ratings=3).fit(ratings, 4).labels_
    assert list(labels.status) == ["kept", "too_few_ratings", "kept", "unanswered"]
    assert np.isnan(labels.label[3])


def test_the_ordinal_model_keeps_its_fit_and_orders_items_by_their_ratings():
    ratings = _ratings()
    model = aggregator("model", not_pertinent_share=0.5, min_ratings=1)
    assert isinstance(model, OrdinalModel) and model.result_ is None
    assert model.fit(ratings, 4) is model
    labels = model.labels_
    assert model.result_ is not None and model.result_.low.shape == (4,)
    assert labels.label[0] < labels.label[2] < labels.label[1]


def test_every_name_is_a_class_and_an_unknown_one_is_a_line():
    assert {name: kind.name for name, kind in REGISTERED.items()} == {
        n: n for n in ("mean", "median", "round", "model")
    }
    with pytest.raises(UserError, match="--aggregate must be mean, median, round or model "):
        aggregator("mode", not_pertinent_share=0.5, min_ratings=1)


def test_the_help_the_check_and_the_card_read_the_one_list():
    """A class defined with a name is in `--aggregate`'s help, passes the import's check and has its card
    sentence; a second class under a taken name is refused when it is defined."""

    class Trimmed(Mean):
        name = "test-trimmed"
        help = "test-trimmed (a policy defined by this test)"
        card = "Labels per item: a test's policy."

    try:
        assert Trimmed.help in aggregator_help()
        assert aggregator_class("test-trimmed") is Trimmed
        assert policy_sentence("test-trimmed") == Trimmed.card
        _check_rating_options("test-trimmed", 0.5, 1)
        with pytest.raises(TypeError, match="taken"):
            type("Again", (Mean,), {"name": "test-trimmed"})
    finally:
        REGISTERED.pop("test-trimmed")
    with pytest.raises(UserError, match="--aggregate must be"):
        _check_rating_options("test-trimmed", 0.5, 1)
