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


def test_the_prepared_folder_holds_the_crowd_as_a_results_file(tmp_path):
    where = import_speed.prepare(200, tmp_path, seed=1)
    prepared = json.loads((where / "prepared.json").read_text())
    assert prepared == {"items": 200, "seed": 1, "ratings": 600, "workers": 10}
    rows = (where / "results.csv").read_text().splitlines()
    assert len(rows) == 601 and rows[0].replace('"', "") == "item_id,worker_id,assignment_id,rating,not_pertinent"
    assert import_speed.prepare(200, tmp_path, seed=1) == where  # made once, then reused


@pytest.mark.parametrize("how", ["model", "mean"])
def test_the_bench_entry_imports_a_tiny_batch(how: str, tmp_path, capsys: pytest.CaptureFixture[str]):
    where = import_speed.prepare(200, tmp_path)
    (found,) = import_speed.main(["--child", how, "--folder", str(where)])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == found
    assert found["items"] == 200 and found["ratings"] == 600 and found["how"] == how
    assert found["items_per_s"] > 0 and found["peak_mib"] > 0 and 1 <= found["mean_label"] <= 5
    assert (where / "annotate" / "ratings" / "items.parquet").is_file()
