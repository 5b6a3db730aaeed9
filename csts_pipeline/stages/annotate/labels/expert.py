"""`annotate import --stage ratings --expert FILE`: careful labels for a sample of the batch's items (an expert's
re-annotation, as Tu et al. re-annotated C-STS's validation set), the evidence that measures every worker.

Why: with one rating an item and no gold, a person's and a model's reliabilities are not identified, only their
agreement is (labels/trust.py). Items whose true label is known measure each worker directly, people and models
alike, and the shared shift's spread (labels/shift.py). The rater model fixes their labels (ordinal.fit's
`known`), so the items' published label is the expert's.

The file is CSV, JSON lines or Parquet, in one of two forms: `item_id` and `label` (the batch's own ids), or
C-STS rows `sentence1`, `sentence2`, `condition`, `label` (the form a re-annotation arrives in), matched to the
batch's items by their text with whitespace and case folded. Labels are on the 1-5 scale (decimals allowed; the
EM takes the nearest integer, halves up); -1 marks a condition the expert rejected, which is left out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.layout import RATING_SCALE

REJECTED = -1
TEXT = ("sentence1", "sentence2", "condition")


@dataclass
class ExpertLabels:
    """Per batch item, the expert's label rounded to 1-5 (0 where it has none), how the rows were matched, and
    the rows that met no item (or were rejected)."""

    known: np.ndarray
    matched_by: str
    unmatched: int
    rejected: int

    @property
    def items(self) -> int:
        return int((self.known > 0).sum())

    def summary(self) -> dict[str, Any]:
        return {"items": self.items, "matched_by": self.matched_by, "unmatched_rows": self.unmatched,
                "rejected_rows": self.rejected}  # fmt: skip


def read_table_file(path: Path) -> pa.Table:
    """A CSV, JSON lines or Parquet file as a table; an unreadable one is a one-line UserError."""
    if not path.is_file():
        raise UserError(f"{path}: not found")
    try:
        if path.suffix == ".parquet":
            return pq.read_table(path)
        if path.suffix in (".jsonl", ".json"):
            lines = path.read_text(encoding="utf-8-sig").split("\n")  # not splitlines: U+2028 may sit in a text
            rows = [json.loads(line) for line in lines if line.strip()]
            return pa.Table.from_pylist(rows)
        return pacsv.read_csv(path)
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError) as exc:
        raise UserError(
            f"{path}: not a readable CSV, JSON lines or Parquet file ({str(exc).splitlines()[0]})"
        ) from None


def _fold(text: Any) -> str:
    return " ".join(str(text).split()).casefold()


def read_expert(path: Path, items: list[dict[str, Any]]) -> ExpertLabels:
    """The expert's labels matched to the batch's `items` (the rating items, controls left out)."""
    table = read_table_file(path)
    if "label" not in table.column_names:
        raise UserError(f"{path}: no column label (expert labels: item_id and label, or {', '.join(TEXT)} and label)")
    if "item_id" in table.column_names:
        by, keys = "item_id", [str(v) for v in table.column("item_id").to_pylist()]
        at = {str(item["item_id"]): n for n, item in enumerate(items)}
    elif all(name in table.column_names for name in TEXT):
        by = "sentence1, sentence2 and condition"
        columns = [table.column(name).to_pylist() for name in TEXT]
        keys = ["\t".join(_fold(v) for v in row) for row in zip(*columns)]
        at = {"\t".join(_fold(item.get(name, "")) for name in TEXT): n for n, item in enumerate(items)}
    else:
        raise UserError(f"{path}: needs item_id and label, or {', '.join(TEXT)} and label")
    labels = _labels(path, table)
    known = np.zeros(len(items), np.int64)
    unmatched = rejected = 0
    for key, label in zip(keys, labels):
        if label == REJECTED:
            rejected += 1
        elif key not in at:
            unmatched += 1
        else:
            known[at[key]] = int(np.floor(label + 0.5))
    if not (known > 0).any():
        raise UserError(f"{path}: none of its {len(keys)} row(s) matches an item of the batch (by {by})")
    return ExpertLabels(known, by, unmatched, rejected)


def _labels(path: Path, table: pa.Table) -> np.ndarray:
    """The label column as floats, each on the scale or -1; otherwise a one-line error naming the first row."""
    try:
        label = table.column("label").cast(pa.float64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise UserError(f"{path}: column label is not numeric") from None
    low, high = RATING_SCALE
    bad = ~(((label >= low) & (label <= high)) | (label == REJECTED))  # nan is bad too
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise UserError(
            f"{path}: row {first + 1}: label {label[first]:g} is not on the scale ({low}-{high}, or {REJECTED} "
            f"for a rejected condition); {int(bad.sum())} such row(s)"
        )
    return label
