"""The peers bench (peers.py, beside this file) on the trimmed USTS-C slice (tests/data/usts: 40 pairs, 19 raters each):
the project and every crowd-kit peer on the same answers, two raters an item, without and with the expert sample."""

import math
from pathlib import Path

import numpy as np
import pytest

from bench.annotate import peers

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "usts"


def test_the_smallest_set_holds_the_level_with_the_fewest_labels():
    posterior = np.array([[0.95, 0.05, 0, 0, 0], [0.1, 0.5, 0.35, 0.05, 0], [0.2, 0.2, 0.2, 0.2, 0.2]])
    sets = peers.smallest_sets(posterior)
    assert sets[0].tolist() == [True, False, False, False, False]
    assert sets[1].tolist() == [True, True, True, False, False]
    assert sets[2].sum() == 5


@pytest.mark.slow
def test_every_method_has_finite_figures_on_the_same_answers(capsys):
    found = peers.main(["--usts", str(DATA), "--k", "2", "--seeds", "1", "--no-stsb"])
    assert set(found) == {(peers.USTS_NAME, 2, arm) for arm in ("no evidence", "expert sample")}
    methods = {peers.PROJECT, peers.POSTERIOR, peers.MEAN}
    methods |= {f"{name}: {reading}" for name in peers.PEERS for reading in ("class", "posterior mean")}
    for key, rows in found.items():
        assert set(rows) == methods, key
        for method, (one,) in rows.items():
            named = peers.FIGURES if method != peers.MEAN else ("spearman", "mae", "offset", "seconds")
            assert all(math.isfinite(one[name]) for name in named), (key, method, one)
            assert 0 < one["spearman"] <= 1 and 0 <= one["mae"] < 4
    out = capsys.readouterr().out
    assert "### USTS-C train, k = 2, expert sample" in out and "| Wawa: class |" in out
