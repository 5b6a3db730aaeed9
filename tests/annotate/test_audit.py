"""`annotate audit`: a fixture whose figures the test computes itself from the alignment it built, alignment that
survives reworded conditions and reordered pairs, id alignment, bad files, and the shipped example."""

from __future__ import annotations

import json
from pathlib import Path

import krippendorff
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from scipy.stats import pearsonr, spearmanr

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.labels.audit_stats import audit, condition_kind
from tests.annotate.test_annotate import cli, cli_error

REPO = Path(__file__).resolve().parents[2]
KINDS = ["The colour of the car.", "The number of people.", "The location.", "The activity being performed."]


def fixture_tables(seed: int = 0) -> tuple[pa.Table, pa.Table, dict]:
    """60 pairs (120 rows, high then low) and a re-annotation of 50 of them: conditions reworded, pairs in another
    order, 5 conditions rejected (-1), labels = ours plus integer noise, 3 extra rows of pairs not in ours.
    Returns both tables and, per reference row, the labels row it belongs to (None for the extra ones)."""
    rng = np.random.default_rng(seed)
    n_pairs = 60
    s1 = [f"Sentence one of pair {p}, with a dog." for p in range(n_pairs) for _ in range(2)]
    s2 = [f"Sentence two of pair {p}, with a cat." for p in range(n_pairs) for _ in range(2)]
    conditions = [KINDS[(2 * p + k) % 4] for p in range(n_pairs) for k in range(2)]
    ours = np.round(
        np.where(np.arange(2 * n_pairs) % 2 == 0, rng.uniform(3, 5, 2 * n_pairs), rng.uniform(1, 3, 2 * n_pairs)), 2
    )
    labels = pa.table({"sentence1": s1, "sentence2": s2, "condition": conditions, "label": ours})
    kept_pairs = rng.permutation(n_pairs)[:50]
    rows, origin = [], []
    for p in kept_pairs:
        for k in range(2):
            i = 2 * p + k
            value = float(np.clip(np.rint(ours[i] + rng.integers(-1, 2)), 1, 5))
            rows.append(
                {
                    "sentence1": s1[i].upper(),
                    "sentence2": "  " + s2[i],
                    "condition": "Regarding " + conditions[i].lower(),
                    "label": value,
                }
            )
            origin.append(i)
    for r in rng.choice(len(rows), 5, replace=False):
        rows[r]["label"] = -1.0
    for e in range(3):
        rows.append({"sentence1": f"Other {e}", "sentence2": "Else", "condition": "The location.", "label": 3.0})
        origin.append(None)
    return labels, pa.Table.from_pylist(rows), {"origin": origin}


def test_the_audit_reproduces_figures_computed_from_the_known_alignment(tmp_path: Path):
    labels, reference, truth = fixture_tables()
    pacsv.write_csv(labels, tmp_path / "labels.csv")
    pq.write_table(reference, tmp_path / "reference.parquet")
    result = audit(tmp_path / "labels.csv", tmp_path / "reference.parquet", seed=1)
    origin = truth["origin"]
    matched = [(o, r) for r, o in enumerate(origin) if o is not None]
    ours = labels.column("label").to_numpy()
    theirs = reference.column("label").to_numpy()
    x = np.array([ours[o] for o, r in matched if theirs[r] != -1])
    y = np.array([theirs[r] for o, r in matched if theirs[r] != -1])
    assert result["aligned_by"] == "sentence pair and position"
    assert result["matched"] == 100 and result["unmatched"] == {"labels": 20, "reference": 3}
    assert result["rejected_by_reference"] == 5 and result["rejected_share"] == 0.05
    found = result["agreement"]
    assert found["rows"] == 95
    exact = sum(int(a + 0.5) == int(b + 0.5) for a, b in zip(x, y)) / len(x)
    assert found["exact_agreement"] == pytest.approx(exact, abs=1e-4)
    assert found["differ_by_1_or_more"] == pytest.approx(np.mean(np.abs(x - y) >= 1), abs=1e-4)
    assert found["differ_by_2_or_more"] == pytest.approx(np.mean(np.abs(x - y) >= 2), abs=1e-4)
    assert found["spearman"] == pytest.approx(spearmanr(x, y).statistic, abs=1e-4)
    assert found["pearson"] == pytest.approx(pearsonr(x, y).statistic, abs=1e-4)
    for name in ("spearman", "pearson"):
        low, high = found["interval_95"][name]
        assert low < found[name] < high and high - low < 0.5
    alpha = krippendorff.alpha(
        reliability_data=[x, y], level_of_measurement="ordinal", value_domain=np.unique([*x, *y])
    )
    assert found["alpha_ordinal"] == pytest.approx(alpha, abs=1e-4)
    # by kind: the kind is the labels' condition's; counts add up
    kinds = result["by_condition_kind"]
    assert set(kinds) == {"colour", "number", "place", "action"}
    assert sum(k["matched"] for k in kinds.values()) == 100 and sum(k["rejected"] for k in kinds.values()) == 5
    disputed = result["most_disputed"]
    gaps = [abs(d["label"] - d["reference_label"]) for d in disputed]
    assert gaps == sorted(gaps, reverse=True) and gaps[0] == pytest.approx(np.abs(x - y).max())
    assert disputed[0]["reference_condition"].startswith("Regarding ")
    assert audit(tmp_path / "labels.csv", tmp_path / "reference.parquet", seed=1) == result  # seeded


def test_alignment_survives_reworded_conditions_but_not_reordered_rows_within_a_pair(tmp_path: Path):
    labels, reference, truth = fixture_tables()
    pacsv.write_csv(labels, tmp_path / "labels.csv")
    pacsv.write_csv(reference, tmp_path / "reference.csv")
    result = audit(tmp_path / "labels.csv", tmp_path / "reference.csv")
    ours = labels.column("condition").to_pylist()
    for row in result["most_disputed"]:  # every matched row is its own row of the pair, reworded or not
        assert row["reference_condition"] == "Regarding " + ours[row["row"]].lower()
    # with an id column in both files, ids win over positions
    ids = [f"x{i}" for i in range(labels.num_rows)]
    with_ids = labels.append_column("id", pa.array(ids))
    ref_ids = [ids[o] if o is not None else f"other{n}" for n, o in enumerate(truth["origin"])]
    swapped = reference.append_column("id", pa.array(ref_ids)).take(pa.array(np.arange(reference.num_rows)[::-1]))
    pacsv.write_csv(with_ids, tmp_path / "labels_id.csv")
    pacsv.write_csv(swapped, tmp_path / "reference_id.csv")
    by_id = audit(tmp_path / "labels_id.csv", tmp_path / "reference_id.csv")
    assert by_id["aligned_by"] == "id" and by_id["matched"] == 100
    assert by_id["agreement"]["spearman"] == result["agreement"]["spearman"]
    # reversed rows without ids put each pair's low row against the high one: the audit sees the disagreement
    pacsv.write_csv(swapped.drop_columns(["id"]), tmp_path / "reversed.csv")
    reversed_rows = audit(tmp_path / "labels.csv", tmp_path / "reversed.csv")
    assert reversed_rows["agreement"]["spearman"] < 0
    assert result["uneven_pairs"] == 0 and by_id["uneven_pairs"] == 0
    # a reference holding only some pairs' low rows is matched by position: said, never silent
    lows = reference.filter(pa.array([n % 2 == 1 or n >= 100 or n < 20 for n in range(reference.num_rows)]))
    pacsv.write_csv(lows, tmp_path / "lows.csv")
    said = cli("annotate", "audit", "--labels", tmp_path / "labels.csv", "--reference", tmp_path / "lows.csv",
               "--out", tmp_path / "audit-lows")  # fmt: skip
    assert "warning: 40 sentence pair(s) have a different number of rows" in said
    assert json.loads((tmp_path / "audit-lows" / "audit.json").read_text())["uneven_pairs"] == 40


def test_condition_kinds_and_bad_files(tmp_path: Path):
    assert condition_kind("The colour of the car.") == "colour" and condition_kind("How many dogs?") == "number"
    assert condition_kind("The mood.") == "other"
    labels, _, _ = fixture_tables()
    pacsv.write_csv(labels.drop_columns(["condition"]), tmp_path / "bad.csv")
    pacsv.write_csv(labels, tmp_path / "labels.csv")
    with pytest.raises(UserError, match=r"bad.csv: missing column\(s\) condition"):
        audit(tmp_path / "labels.csv", tmp_path / "bad.csv")
    error = cli_error("annotate", "audit", "--labels", tmp_path / "labels.csv", "--reference", tmp_path / "none.csv")
    assert "none.csv: not found" in error


def test_the_shipped_example_on_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(REPO)
    example = Path("docs/examples/annotate")
    args = ["annotate", "audit", "--labels", example / "audit_labels.csv", "--reference"]
    output = cli(*args, example / "audit_reference.csv", "--out", tmp_path / "audit")
    assert (
        output.splitlines()[0]
        == "12 rows matched by sentence pair and position; unmatched: 2 of the labels, 1 of the reference"
    )
    result = json.loads((tmp_path / "audit" / "audit.json").read_text())
    assert result["rejected_by_reference"] == 1 and (tmp_path / "audit" / "audit.md").read_text().startswith("# Audit")
    again = cli(*args, example / "audit_reference.csv", "--out", tmp_path / "audit")
    assert again.startswith("up to date:")
