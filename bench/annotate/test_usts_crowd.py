"""The USTS bench's main path (usts_crowd.py, beside this file) on the trimmed USTS-C slice (tests/data/usts: 40 pairs,
19 raters each): two raters an item, without and with the expert sample, through the import's own function."""

import math
from pathlib import Path

import pytest

from bench.annotate import usts_crowd
from csts_pipeline.testing.command_path import prepare_folder, task_ids

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "usts"


def test_the_slice_reads_as_the_full_file_does():
    pairs = usts_crowd.read_usts(DATA / usts_crowd.USTS_C)
    assert len(pairs) == 40 and {len(p["raw"]) for p in pairs} == {19}
    assert all(p["s1"] and p["s2"] for p in pairs)


def test_draw_keeps_each_rater_by_position_and_holds_the_rest_out_as_the_truth():
    pairs = usts_crowd.read_usts(DATA / usts_crowd.USTS_C)[:3]
    items = {f"i{n}-{c}": (n, c) for n in range(3) for c in ("high", "low")}
    rows, truth, mean = usts_crowd.draw(pairs, items, 2, seed=0)
    assert len(rows) == 2 * len(items) and set(truth) == set(mean) == set(items)
    for item, (pair, _) in items.items():
        mine = [r for r in rows if r["item_id"] == item]
        drawn = [int(r["worker_id"][1:]) for r in mine]
        raw = pairs[pair]["raw"]
        assert [r["rating"] for r in mine] == [min(5, max(1, round(1 + 0.8 * raw[w]))) for w in drawn]
        rest = [x for w, x in enumerate(raw) if w not in drawn]
        assert truth[item] == pytest.approx(1 + 0.8 * sum(rest) / len(rest))


@pytest.mark.slow
def test_the_bench_gives_finite_figures_for_two_raters_an_item(capsys):
    found = usts_crowd.main(["--usts", str(DATA), "--k", "2", "--seeds", "1"])
    assert set(found) == {(2, arm) for arm in usts_crowd.ARMS}
    for runs in found.values():
        (one,) = runs
        for name in ("spearman", "baseline", "coverage"):
            assert math.isfinite(one[name]), (name, one)
        assert one["measured_by"] == "repeats" and one["ambiguity_sd"] is not None
    assert "| 2 | expert sample |" in capsys.readouterr().out


def test_a_sentence_with_a_line_separator_reaches_the_tasks(tmp_path: Path):
    """Two USTS-U sentences hold U+2028, which json.dumps writes as is: the task files are split at newlines only."""
    items = prepare_folder([("第一句\u2028第二句", "另一句"), ("一", "二")], tmp_path / "annotate")
    assert sorted(task_ids(tmp_path / "annotate" / "ratings_tasks")) == sorted(items) and len(items) == 4
