"""`annotate import --stage ratings --expert FILE`: careful labels for a sample of the batch's items (an expert's
re-annotation, as Tu et al. re-annotated C-STS's validation set), the evidence that measures every worker.

Why: with one rating an item and no gold, a person's and a model's reliabilities are not identified, only their
agreement is (aggregation/trust.py). Items whose true label is known measure each worker directly, people and models
alike, and the shared shift's spread (aggregation/em/shift.py). The rater model fixes their labels (ordinal.fit's
`known`, the nearest integer, halves up), and the items' published label is the expert's own value (3.7 stays
3.7), an item no person rated included.

Each file is CSV, JSON lines, a JSON array of objects, or Parquet, in one of two forms: `item_id` and `label`
(the batch's own ids), or C-STS rows `sentence1`, `sentence2`, `condition`, `label` (the form a re-annotation
arrives in), matched to every batch item of that text, whitespace and case folded. Labels are on the 1-5 scale
(decimals allowed); -1 marks a condition the expert rejected, which is left out. An item labelled twice alike
is taken once; labelled twice otherwise (in one file or across several `--expert` files) it is refused."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.labels.agreement import ItemLabels
from csts_pipeline.stages.annotate.layout import RATING_SCALE

REJECTED = -1
TEXT = ("sentence1", "sentence2", "condition")
BY_TEXT = "sentence1, sentence2 and condition"


@dataclass
class ExpertLabels:
    """Per batch item, the expert's own label (`value`, nan where none; the fit reads its nearest integer,
    em_answers.rounded), how the rows were matched, and the rows that met no item (or were rejected)."""

    value: np.ndarray
    matched_by: str
    unmatched: int
    rejected: int
    files: list[Path] = field(default_factory=list)

    @property
    def items(self) -> int:
        return int((~np.isnan(self.value)).sum())

    def publish(self, labels: ItemLabels) -> ItemLabels:
        """The labels with each sample item's the expert's own value; an item no person answered is kept on it."""
        has = ~np.isnan(self.value)
        status = labels.status.copy()
        status[has & (labels.answers == 0)] = "kept"
        return replace(labels, label=np.where(has, self.value, labels.label), status=status)

    def summary(self, answers: np.ndarray) -> dict[str, Any]:
        """agreement.json's `expert`; `answers`: the people's answers per item."""
        unanswered = int((~np.isnan(self.value) & (answers == 0)).sum())
        return {"items": self.items, "items_unanswered": unanswered, "matched_by": self.matched_by,
                "unmatched_rows": self.unmatched, "rejected_rows": self.rejected,
                "files": [str(p) for p in self.files]}  # fmt: skip


def read_table_file(path: Path) -> pa.Table:
    """A CSV, JSON lines, JSON array or Parquet file as a table; an unreadable one is a one-line UserError."""
    if not path.is_file():
        raise UserError(f"{path}: not found")
    try:
        if path.suffix == ".parquet":
            return pq.read_table(path)
        if path.suffix in (".jsonl", ".json"):
            return pa.Table.from_pylist(json_rows(path))
        return pacsv.read_csv(path)
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError) as exc:
        raise UserError(
            f"{path}: not a readable CSV, JSON lines, JSON array or Parquet file ({str(exc).splitlines()[0]})"
        ) from None


def json_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON array of objects or of JSON lines, each an object; anything else (a bare number, a
    nested array) is a one-line UserError naming the first such row."""
    text = path.read_text(encoding="utf-8-sig")
    rows: Any = None
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError:
            rows = None  # JSON lines whose first line is an array: refused below, row by row
    if not isinstance(rows, list):
        lines = text.split("\n")  # not splitlines: U+2028 may sit in a text
        rows = [json.loads(line) for line in lines if line.strip()]
    for n, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise UserError(
                f"{path}: row {n} is {_json_kind(row)}, not an object; give one object per row (JSON lines, or a "
                "JSON array of objects)"
            )
    return rows


def _json_kind(value: Any) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else kinds.get(type(value), "a value")


def _fold(text: Any) -> str:
    return " ".join(str(text).split()).casefold()


def _text_key(row: Any) -> str:
    return "\t".join(_fold(value) for value in row)


@dataclass
class _Given:
    """What the files said of one item so far: the label, and where (file, row)."""

    label: float
    path: Path
    row: int


def read_expert(paths: Path | list[Path], items: list[dict[str, Any]]) -> ExpertLabels:
    """The expert's labels matched to the batch's `items` (the rating items, controls left out), from one file
    or several (`--expert` repeated); an item given two different labels is a one-line UserError."""
    files = [paths] if isinstance(paths, Path) else list(paths)
    by_id: dict[str, list[int]] = {}
    by_text: dict[str, list[int]] = {}
    for n, item in enumerate(items):
        by_id.setdefault(str(item["item_id"]), []).append(n)
        by_text.setdefault(_text_key(item.get(name, "") for name in TEXT), []).append(n)
    given: dict[int, _Given] = {}
    unmatched = rejected = matched_rejections = rows = 0
    ways = []
    for path in files:
        by, keys, labels = _rows(path)
        ways.append(by)
        at = by_id if by == "item_id" else by_text
        rows += len(keys)
        for row, (key, label) in enumerate(zip(keys, labels), start=1):
            matched = at.get(key, [])
            rejected += label == REJECTED
            unmatched += label != REJECTED and not matched
            matched_rejections += label == REJECTED and bool(matched)
            for n in matched:
                _settle(given, n, _Given(float(label), path, row), items)
    value = np.full(len(items), np.nan)
    for n, found in given.items():
        value[n] = np.nan if found.label == REJECTED else found.label
    if np.isnan(value).all():
        raise UserError(_nothing_matched(files, rows, matched_rejections, ways))
    return ExpertLabels(value, ", ".join(dict.fromkeys(ways)), unmatched, rejected, files)


def _settle(given: dict[int, _Given], n: int, new: _Given, items: list[dict[str, Any]]) -> None:
    """Record `new` for item `n`; the same label again passes, another is refused naming both."""
    old = given.setdefault(n, new)
    if old.label == new.label:
        return
    item = items[n]["item_id"]
    where = f"row {old.row}" if old.path == new.path else f"{old.path} row {old.row}"
    raise UserError(
        f"{new.path}: row {new.row}: item {item} labelled {_shown(new.label)}, but {_shown(old.label)} at {where}; "
        "give each item one label"
    )


def _shown(label: float) -> str:
    return f"{label:g}" + (" (rejected)" if label == REJECTED else "")


def _nothing_matched(files: list[Path], rows: int, rejections: int, ways: list[str]) -> str:
    """The line refusing expert files that label no item: none matched, or only rejections did."""
    names = ", ".join(map(str, files))
    if rejections:
        return (
            f"{names}: no item gets a label: the {rejections} row(s) that match an item are rejections (label "
            f"{REJECTED}, a condition the expert rejected), and rejections are left out"
        )
    return f"{names}: none of its {rows} row(s) matches an item of the batch (by {', '.join(dict.fromkeys(ways))})"


def _rows(path: Path) -> tuple[str, list[str], np.ndarray]:
    """One file's form (by item id or by text), each row's key and its label."""
    table = read_table_file(path)
    if "label" not in table.column_names:
        raise UserError(f"{path}: no column label (expert labels: item_id and label, or {', '.join(TEXT)} and label)")
    if "item_id" in table.column_names:
        by, keys = "item_id", [str(v) for v in table.column("item_id").to_pylist()]
    elif all(name in table.column_names for name in TEXT):
        by, keys = BY_TEXT, [_text_key(row) for row in zip(*(table.column(name).to_pylist() for name in TEXT))]
    else:
        raise UserError(f"{path}: needs item_id and label, or {', '.join(TEXT)} and label")
    return by, keys, _labels(path, table)


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
