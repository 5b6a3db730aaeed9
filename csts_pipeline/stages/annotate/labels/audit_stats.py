"""`annotate audit`: a finished C-STS dataset held against a careful re-annotation of (part of) it.

Both files are C-STS tables (sentence1, sentence2, condition, label; CSV or Parquet); in the reference a label of
-1 marks a condition the re-annotators rejected. Rows are aligned by an id column when both files have the same
one (`id` or `item_id`), else by the sentence pair and the row's position among that pair's rows in file order,
so a re-annotation that rewords the conditions still aligns (C-STS lists each pair's high condition first).
The figures follow Tu et al. (ACL 2024), who re-annotated C-STS's validation set: invalid conditions, labels
that differ, and the correlation between the two labellings."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from scipy.stats import pearsonr, rankdata, spearmanr

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.layout import RATING_SCALE

REQUIRED = ("sentence1", "sentence2", "condition", "label")
ID_COLUMNS = ("id", "item_id")
REJECTED = -1
BOOTSTRAP = 2000
DISPUTED = 10
# kinds of condition, by the first keyword list that matches a word of the condition (lower case); else "other"
CONDITION_KINDS = {
    "colour": ("color", "colour", "colors", "colours"),
    "number": ("number", "count", "many", "quantity", "amount"),
    "place": ("location", "place", "setting", "where", "scene", "background", "room", "surface"),
    "action": ("action", "activity", "doing", "sport", "movement", "motion", "pose", "position"),
    "people": ("person", "people", "man", "woman", "gender", "age", "clothing", "clothes", "outfit", "wearing"),
    "time and weather": ("time", "weather", "season", "day", "night", "lighting"),
    "object": ("object", "type", "kind", "animal", "vehicle", "food", "item", "size", "shape", "material", "brand"),
}


def read_csts(path: Path, reference: bool = False) -> pa.Table:
    """A C-STS file (CSV or Parquet) with its label as float64; missing columns or labels, and a label off the
    1-5 scale (in the `reference`, also -1: rejected), are a UserError."""
    if not path.is_file():
        raise UserError(f"{path}: not found")
    try:
        table = pq.read_table(path) if path.suffix == ".parquet" else pacsv.read_csv(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise UserError(f"{path}: not a readable CSV or Parquet file ({str(exc).splitlines()[0]})") from None
    missing = [name for name in REQUIRED if name not in table.column_names]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)} (a C-STS file: {', '.join(REQUIRED)})")
    try:
        label = table.column("label").cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise UserError(f"{path}: column label is not numeric") from None
    if label.null_count:
        raise UserError(f"{path}: {label.null_count} row(s) without a label")
    _check_scale(path, label.to_numpy(), reference)
    return table.set_column(table.column_names.index("label"), "label", label)


def _check_scale(path: Path, label: np.ndarray, reference: bool) -> None:
    """Every label on the 1-5 scale (or -1 in the reference): a Spearman over 9s and 0s would be meaningless."""
    low, high = RATING_SCALE
    bad = ~((label >= low) & (label <= high)) & ~(reference & (label == REJECTED))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        row = first + 2 if path.suffix != ".parquet" else first + 1  # CSV: the header is row 1
        allowed = f"{low}-{high} or {REJECTED} (rejected)" if reference else f"{low}-{high}"
        raise UserError(
            f"{path}: row {row}: label {label[first]:g} is not on the scale ({allowed}); {int(bad.sum())} such row(s)"
        )


def _text(table: pa.Table, name: str) -> list[str]:
    return [" ".join(str(v).split()).casefold() for v in table.column(name).to_pylist()]


def _keys(table: pa.Table) -> list[tuple[str, str, int]]:
    """(sentence1, sentence2, position among the rows of that pair), whitespace and case folded."""
    seen: dict[tuple[str, str], int] = {}
    keys = []
    for pair in zip(_text(table, "sentence1"), _text(table, "sentence2")):
        keys.append((*pair, seen.get(pair, 0)))
        seen[pair] = seen.get(pair, 0) + 1
    return keys


@dataclass
class Alignment:
    """Row indexes of the labels and the reference that match, in the labels' order, and how they were matched."""

    labels: np.ndarray
    reference: np.ndarray
    by: str
    uneven_pairs: int = 0  # by position: sentence pairs with more rows in one file than in the other


def align(labels: pa.Table, reference: pa.Table, names: tuple[Path, Path]) -> Alignment:
    """Match rows by a shared id column, else by (sentence pair, position among its rows)."""
    shared = [name for name in ID_COLUMNS if name in labels.column_names and name in reference.column_names]
    if shared:
        by = shared[0]
        left = [str(v) for v in labels.column(by).to_pylist()]
        right = [str(v) for v in reference.column(by).to_pylist()]
    else:
        by = "sentence pair and position"
        left, right = _keys(labels), _keys(reference)  # type: ignore[assignment]
    for keys, path in zip((left, right), names):
        if shared and len(set(keys)) < len(keys):
            raise UserError(f"{path}: column {by} has repeated values; it cannot align the rows")
    where = {key: index for index, key in enumerate(right)}
    pairs = [(i, where[key]) for i, key in enumerate(left) if key in where]
    matched = np.array(pairs, np.int64).reshape(-1, 2)
    return Alignment(matched[:, 0], matched[:, 1], by, 0 if shared else _uneven(left, right))


def _uneven(left: list, right: list) -> int:
    """Sentence pairs in both files with a different number of rows: matched by position, a pair's rows may be
    the wrong ones (a reference holding only a pair's low row meets the labels' high row)."""
    ours, theirs = (Counter((first, second) for first, second, _ in keys) for keys in (left, right))
    return sum(1 for pair, n in ours.items() if pair in theirs and theirs[pair] != n)


def condition_kind(condition: str) -> str:
    words = set(re.findall(r"[a-z]+", condition.lower()))
    return next((kind for kind, keys in CONDITION_KINDS.items() if words & set(keys)), "other")


def bootstrap(x: np.ndarray, y: np.ndarray, seed: int, draws: int = BOOTSTRAP) -> dict[str, list[float] | None]:
    """Percentile 95% intervals of Pearson and Spearman over `draws` resamples of the rows (seeded)."""
    if len(x) < 3:
        return {"pearson": None, "spearman": None}
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(x), (draws, len(x)))
    found = {}
    for name, (a, b) in {
        "pearson": (x[rows], y[rows]),
        "spearman": (rankdata(x[rows], axis=1), rankdata(y[rows], axis=1)),
    }.items():
        a = a - a.mean(axis=1, keepdims=True)
        b = b - b.mean(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = (a * b).sum(axis=1) / np.sqrt((a**2).sum(axis=1) * (b**2).sum(axis=1))
        r = r[~np.isnan(r)]
        found[name] = [round(float(q), 4) for q in np.quantile(r, [0.025, 0.975])] if len(r) else None
    return found


def figures(x: np.ndarray, y: np.ndarray, seed: int) -> dict[str, Any]:
    """Agreement of labels x with reference y (both 1-5): exact (both rounded half up), differences, Spearman,
    Pearson (with bootstrap 95% intervals) and ordinal Krippendorff's alpha."""
    n = len(x)
    result: dict[str, Any] = {"rows": n}
    if n == 0:
        return result
    difference = np.abs(x - y)
    result["exact_agreement"] = round(float((np.floor(x + 0.5) == np.floor(y + 0.5)).mean()), 4)
    result["differ_by_1_or_more"] = round(float((difference >= 1).mean()), 4)
    result["differ_by_2_or_more"] = round(float((difference >= 2).mean()), 4)
    result["mean_abs_difference"] = round(float(difference.mean()), 4)
    varies = n >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0
    result["spearman"] = round(float(spearmanr(x, y).statistic), 4) if varies else None
    result["pearson"] = round(float(pearsonr(x, y).statistic), 4) if varies else None
    result["interval_95"] = bootstrap(x, y, seed) if varies else {"pearson": None, "spearman": None}
    values = np.unique(np.concatenate([x, y]))
    if len(values) > 1:
        alpha = krippendorff.alpha(
            reliability_data=np.stack([x, y]), value_domain=values, level_of_measurement="ordinal"
        )
        result["alpha_ordinal"] = round(float(alpha), 4)
    else:
        result["alpha_ordinal"] = None
    return result


def kind_figures(conditions: np.ndarray, ours: np.ndarray, theirs: np.ndarray, seed: int) -> dict[str, Any]:
    """The figures per kind of condition (without bootstrap intervals), for the kinds that occur."""
    kinds = np.array([condition_kind(c) for c in conditions], dtype=object)
    rejected = theirs == REJECTED
    found = {}
    for kind in [*CONDITION_KINDS, "other"]:
        mask = kinds == kind
        if mask.any():
            part = figures(ours[mask & ~rejected], theirs[mask & ~rejected], seed)
            part.pop("interval_95", None)
            found[kind] = {"matched": int(mask.sum()), "rejected": int((mask & rejected).sum()), **part}
    return found


def audit(labels_path: Path, reference_path: Path, seed: int = 0) -> dict[str, Any]:
    """Every figure of the audit, as audit.json holds it."""
    labels, reference = read_csts(labels_path), read_csts(reference_path, reference=True)
    aligned = align(labels, reference, (labels_path, reference_path))
    ours = labels.column("label").to_numpy()[aligned.labels]
    theirs = reference.column("label").to_numpy()[aligned.reference]
    rejected = theirs == REJECTED
    compared = ~rejected
    x, y = ours[compared], theirs[compared]
    conditions = np.array(labels.column("condition").to_pylist(), dtype=object)[aligned.labels]
    ref_conditions = np.array(reference.column("condition").to_pylist(), dtype=object)[aligned.reference]
    by_kind = kind_figures(conditions, ours, theirs, seed)
    sentence1 = np.array(labels.column("sentence1").to_pylist(), dtype=object)[aligned.labels]
    sentence2 = np.array(labels.column("sentence2").to_pylist(), dtype=object)[aligned.labels]
    order = np.argsort(-np.abs(x - y), kind="stable")[:DISPUTED]
    rows = np.flatnonzero(compared)[order]
    disputed = [
        {
            "row": int(aligned.labels[r]),
            "reference_row": int(aligned.reference[r]),
            "sentence1": sentence1[r],
            "sentence2": sentence2[r],
            "condition": conditions[r],
            "reference_condition": ref_conditions[r],
            "label": float(ours[r]),
            "reference_label": float(theirs[r]),
        }
        for r in rows
        if abs(ours[r] - theirs[r]) > 0
    ]
    return {
        "labels": str(labels_path),
        "reference": str(reference_path),
        "aligned_by": aligned.by,
        "uneven_pairs": aligned.uneven_pairs,
        "rows": {"labels": labels.num_rows, "reference": reference.num_rows},
        "matched": len(aligned.labels),
        "unmatched": {
            "labels": labels.num_rows - len(aligned.labels),
            "reference": reference.num_rows - len(aligned.labels),
        },
        "rejected_by_reference": int(rejected.sum()),
        "rejected_share": round(float(rejected.mean()), 4) if len(rejected) else None,
        "seed": seed,
        "bootstrap_draws": BOOTSTRAP,
        "agreement": figures(x, y, seed),
        "by_condition_kind": by_kind,
        "condition_kinds": {kind: list(keys) for kind, keys in CONDITION_KINDS.items()},
        "most_disputed": disputed,
    }
