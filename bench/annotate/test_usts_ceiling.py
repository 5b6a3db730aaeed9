"""The ceiling bench's oracles (usts_ceiling.py, beside this file) on the trimmed USTS-C slice (tests/data/usts) and
on a crowd made so that only a rater's whole table, not their bias and noise, reads them right."""

import json
from pathlib import Path

import numpy as np
import pytest

from bench.annotate import usts_ceiling

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "usts" / "ustsc_train.json"


def test_the_bayes_tables_are_distributions_over_the_answers():
    data = json.loads(DATA.read_text(encoding="utf-8"))
    scores = 1 + 0.8 * np.array([v["raw_annotation"] for v in data.values()], float)
    tables, prior, centres = usts_ceiling.bayes_tables(scores)
    assert tables.shape == (19, usts_ceiling.BAYES_BINS, 5) and np.allclose(tables.sum(axis=2), 1)
    assert prior.sum() == pytest.approx(1) and np.all(np.diff(centres) > 0)
    figures = usts_ceiling.oracle_figures(scores, 2, seed=0)
    assert all(np.isfinite(v) for v in figures.values()) and "Bayes oracle on the answers" in figures


def test_the_bayes_oracle_reads_a_rater_who_turns_the_scale_around():
    """Four of 19 raters answer 6 - score: a bias and a noise cannot say so, their whole table does."""
    rng = np.random.default_rng(0)
    truth = rng.uniform(1, 5, 1500)
    scores = np.clip(truth[:, None] + rng.normal(0, 0.5, (1500, 19)), 1, 5)
    scores[:, :4] = 6 - scores[:, :4]
    figures = usts_ceiling.oracle_figures(scores, 1, seed=0)
    assert figures["Bayes oracle on the answers"] > figures["oracle on the answers"] + 0.1
