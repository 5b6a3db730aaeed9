"""The import-speed bench (import_speed.py, beside this file) at a tiny size, so the bench keeps working (its figures
are not checked here: wall time on a shared machine says nothing)."""

import json

import numpy as np
import pytest

from bench.annotate import import_speed


def test_the_large_crowd_gives_each_item_distinct_raters_of_every_kind():
    crowd = import_speed.large_crowd(2000, seed=3)
    r = crowd.ratings
    assert len(r.item) == 2000 * import_speed.PER_ITEM and len(crowd.kind) == 2000 // import_speed.ITEMS_PER_WORKER
    pairs = {(int(i), str(w)) for i, w in zip(r.item, r.worker)}
    assert len(pairs) == len(r.item)  # no worker twice on an item
    assert set(crowd.kind.values()) == {"careful", "lenient", "harsh", "spammer"}
    assert r.flagged.any() and set(np.unique(r.rating[~r.flagged])) <= {1.0, 2.0, 3.0, 4.0, 5.0}


@pytest.mark.parametrize("how", ["model", "mean"])
def test_the_bench_entry_labels_a_tiny_batch(how: str, capsys: pytest.CaptureFixture[str]):
    (found,) = import_speed.main(["--child", how, "--items", "200"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == found
    assert found["items"] == 200 and found["ratings"] == 600 and found["how"] == how
    assert found["items_per_s"] > 0 and found["peak_mib"] > 0 and 1 <= found["mean_label"] <= 5
