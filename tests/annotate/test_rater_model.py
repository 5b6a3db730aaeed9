"""The rater model as an estimator, on small arrays (as crowd-kit's tests do): options in the constructor, data and
evidence to `fit`, results on attributes; a worker model that grows with its evidence; labels on the crowd's
scale; each item's interval from its own posterior."""

from __future__ import annotations

import numpy as np
import pytest

from csts_pipeline.stages.annotate.aggregation import trust
from csts_pipeline.stages.annotate.aggregation.aggregators import OrdinalModel
from csts_pipeline.stages.annotate.aggregation.em import kernel, ordinal
from csts_pipeline.stages.annotate.aggregation.weighing import Evidence
from csts_pipeline.stages.annotate.labels.agreement import RatingArrays


def crowd(n_items: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Three careful people rate every item (kernel noise 0.6, no bias); "skip" rates every item and never says 2
    (a true 2 is a 1 to them); "few" rates ten items. Returns item, worker, rating and the truth."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 6, n_items)
    careful = kernel.response(np.zeros(1), np.array([0.6]))[0]
    item, worker, rating = [], [], []
    for name in ("a", "b", "c"):
        said = [rng.choice(5, p=careful[t - 1]) + 1 for t in truth]
        item += list(range(n_items))
        worker += [name] * n_items
        rating += said
    skip = [rng.choice(5, p=careful[t - 1]) + 1 for t in truth]
    item += list(range(n_items))
    worker += ["skip"] * n_items
    rating += [1 if s == 2 else s for s in skip]
    item += list(range(10))
    worker += ["few"] * 10
    rating += list(truth[:10])
    return np.array(item), np.array(worker), np.array(rating, float), truth


def test_a_worker_with_hundreds_of_answers_is_read_by_their_own_confusion_one_with_ten_by_their_kernel():
    item, worker, rating, truth = crowd()
    fit = ordinal.fit(item, worker, rating, len(truth))
    assert np.isfinite(fit.strength)  # the data chose a finite strength: tables grew from the answers
    table = dict(zip(fit.workers, fit.table))
    # "skip" never says 2: their table says so for a true 2, which a bias and a noise cannot
    assert table["skip"][1, 0] > 0.6 and table["skip"][1, 1] < 0.15
    own_kernel = kernel.response(fit.bias, fit.noise)
    at = list(fit.workers).index("few")
    assert np.abs(fit.table[at] - own_kernel[at]).max() < 0.2  # ten answers: the kernel, hardly moved
    # and a 1 from "skip" counts for a true 1 or 2, so the labels still order the items
    assert np.corrcoef(fit.label, truth)[0, 1] > 0.9


def test_the_labels_sit_on_the_crowd_s_scale():
    item, worker, rating, truth = crowd(seed=1)
    careful = np.isin(worker, ["a", "b", "c"])
    fit = ordinal.fit(item[careful], worker[careful], rating[careful], len(truth))
    mean_answer = np.bincount(item[careful], rating[careful]) / np.bincount(item[careful])
    assert abs(fit.label.mean() - mean_answer.mean()) < 0.05


def test_one_answer_an_item_holds_the_label_prior_at_the_answers_and_keeps_their_order():
    """One person an item: nothing tells how widely the true labels spread from how noisy the people are, so the
    prior is the answers' own distribution, not one EM collapses onto the middle labels."""
    rng = np.random.default_rng(2)
    truth = rng.choice(5, 1500, p=[0.1, 0.3, 0.3, 0.2, 0.1]) + 1
    said = np.clip(np.rint(truth + rng.normal(0, 0.7, len(truth))), 1, 5)
    fit = ordinal.fit(np.arange(len(truth)), np.array([f"w{i % 10}" for i in range(len(truth))]), said, len(truth))
    answers = (np.bincount(said.astype(int), minlength=6)[1:] + 1) / (len(said) + 5)
    assert np.allclose(fit.prior, answers)
    assert np.all(np.diff([fit.label[said == y].mean() for y in range(1, 6)]) > 0.3)  # a 5 reads above a 4
    low, high = fit.interval()
    assert np.mean((low <= truth) & (truth <= high)) >= 0.85  # integer truths: 0.98 here, 0.93 on USTS-C


def test_known_labels_without_a_model_fit_each_person_in_the_batch_and_say_so():
    """An expert sample and no model: the known labels sit in the fit, so every person is fitted there, not held at
    one pooled noise, and their evidence does not say "pooled"."""
    rng = np.random.default_rng(3)
    truth = rng.integers(1, 6, 600)
    said = np.clip(np.rint(truth + rng.normal(0, 0.7, len(truth))), 1, 5)
    worker = np.array([f"w{i % 10}" for i in range(len(truth))])
    ratings = RatingArrays(np.arange(len(truth)), worker, said, np.zeros(len(truth), bool))
    known = np.where(np.arange(len(truth)) % 20 == 0, truth, 0)
    model = OrdinalModel(not_pertinent_share=0.5, min_ratings=1).fit(ratings, len(truth), Evidence(known=known))
    plan = model.plan_
    assert plan.mode == trust.KNOWN and not plan.pooled and plan.summary()["people_pooled"] is False
    assert "pooled" not in trust.person_words(plan, "w0")
    assert len(set(np.round(model.result_.fit.noise, 3))) > 1  # each person their own noise, none held


def test_the_estimator_takes_options_in_the_constructor_and_evidence_in_fit():
    item, worker, rating, truth = crowd(n_items=200, seed=2)
    ratings = RatingArrays(item, worker, rating, np.zeros(len(item), bool))
    with pytest.raises(TypeError):
        OrdinalModel(0.5, 1)  # type: ignore[misc]  # options are keyword-only
    known = np.zeros(len(truth), np.int64)
    known[:40] = truth[:40]
    model = OrdinalModel(min_ratings=1).fit(ratings, len(truth), Evidence(known=known))
    assert model is not None and model.labels_.label.shape == (len(truth),)
    assert model.probas_.shape == (len(truth), 5) and np.allclose(model.probas_.sum(axis=1), 1)
    low, high = model.intervals_
    mode = np.argmax(model.probas_, axis=1) + 1
    assert ((low <= mode) & (mode <= high)).all()
    assert set(model.workers_) == {"a", "b", "c", "skip", "few"} and model.plan_ is not None
    assert model.plan_.mode == "repeats"
    covered = ((low <= truth) & (truth <= high))[40:].mean()
    assert 0.85 <= covered <= 1.0, covered
