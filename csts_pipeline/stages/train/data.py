"""Readers for sentence-similarity data: C-STS (the authors' CSV, or Parquet shards with the same columns, as
the annotation stage writes them) and the STS Benchmark files; the Quad objective's pairing of a sentence pair's
high- and low-similarity rows; label scaling. Schemas in pipeline.schemas.

Every reader returns a `PairData` whose table has `sentence1`, `sentence2`, `condition` (null for STS) and
`label` (float64, null when the split is unlabelled, as the authors' hidden test split is), plus any provenance
columns the source carries. A file that cannot be used is a `UserError` naming it; nothing is dropped silently.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.shards import read_shards, read_table

TEXT_COLUMNS = ("sentence1", "sentence2", "condition")
CSTS_COLUMNS = (*TEXT_COLUMNS, "label")
CSTS_LABEL_RANGE = (1.0, 5.0)
STSB_LABEL_RANGE = (0.0, 5.0)
LABEL_RANGES = {"csts": CSTS_LABEL_RANGE, "stsb": STSB_LABEL_RANGE}
# The authors' test CSV hides its labels as -1.
HIDDEN_LABEL = -1.0


@dataclass
class PairData:
    """One split of sentence pairs; `source` names the file or folder in every error about it."""

    table: pa.Table
    source: str
    split: str | None = None

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def name(self) -> str:
        return self.split or Path(self.source).stem

    @property
    def has_condition(self) -> bool:
        return self.table["condition"].null_count < self.table.num_rows

    @property
    def labelled(self) -> bool:
        return self.table["label"].null_count == 0

    def column(self, name: str) -> list:
        return self.table[name].to_pylist()

    def labels(self) -> np.ndarray:
        return self.table["label"].to_numpy(zero_copy_only=False).astype(np.float64)

    def take(self, rows: np.ndarray) -> PairData:
        return PairData(self.table.take(pa.array(rows, pa.int64())), self.source, self.split)


def read_csts(path: Path, split: str | None = None) -> PairData:
    """A C-STS CSV file, a Parquet file, or a folder of Parquet shards. With `split`, a source that has a
    `split` column keeps that split's rows; a source without one is taken whole (the authors ship one CSV per
    split). Without `split`, every row is kept."""
    if path.is_dir():
        table = read_shards(path)
    elif path.suffix == ".parquet":
        table = read_table(path)
    elif path.is_file():
        table = _read_csv(path)
    else:
        raise UserError(f"{path}: not found")
    missing = [name for name in CSTS_COLUMNS if name not in table.column_names]
    if missing:
        hint = " (an STS Benchmark file? use --task stsb)" if path.suffix in (".csv", ".tsv") else ""
        raise UserError(f"{path}: missing C-STS column(s) {', '.join(missing)}{hint}")
    if split is not None and "split" in table.column_names:
        table = table.filter(pc.equal(table["split"], split))
        if table.num_rows == 0:
            raise UserError(f"{path}: no rows with split == {split!r}")
    if table.num_rows == 0:
        raise UserError(f"{path}: no rows")
    return PairData(_normalise(table, path, CSTS_LABEL_RANGE, with_condition=True), str(path), split)


def read_stsb(path: Path, split: str | None = None) -> PairData:
    """An STS Benchmark file: tab-separated genre, file, year, id, score (0-5), sentence1, sentence2. Some lines
    carry extra tab fields after sentence2, which are ignored; quotes are text (QUOTE_NONE), never delimiters."""
    if not path.is_file():
        raise UserError(f"{path}: not found")
    sentence1, sentence2, scores = [], [], []
    with path.open(encoding="utf-8", newline="") as handle:
        for number, fields in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
            if not fields or fields == [""]:
                continue
            if len(fields) < 7:
                raise UserError(f"{path}:{number}: expected 7 tab-separated fields (STS Benchmark), got {len(fields)}")
            try:
                scores.append(float(fields[4]))
            except ValueError:
                raise UserError(f"{path}:{number}: score {fields[4]!r} is not a number") from None
            sentence1.append(fields[5])
            sentence2.append(fields[6])
    if not scores:
        raise UserError(f"{path}: no rows")
    table = pa.table(
        {
            "sentence1": pa.array(sentence1, pa.string()),
            "sentence2": pa.array(sentence2, pa.string()),
            "condition": pa.nulls(len(scores), pa.string()),
            "label": pa.array(scores, pa.float64()),
        }
    )
    return PairData(_normalise(table, path, STSB_LABEL_RANGE, with_condition=False), str(path), split)


def read_pairs(path: Path, task: str, split: str | None = None) -> PairData:
    """`task` is `csts` or `stsb`."""
    if task == "stsb":
        return read_stsb(path, split)
    return read_csts(path, split)


def _read_csv(path: Path) -> pa.Table:
    try:
        return pacsv.read_csv(
            path,
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in TEXT_COLUMNS},
                strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        with path.open("rb") as handle:
            tabbed = b"\t" in handle.readline()
        hint = "tab-separated: an STS Benchmark file? use --task stsb" if tabbed else str(exc).splitlines()[0]
        raise UserError(f"{path}: not a readable C-STS CSV ({hint})") from None


def _normalise(table: pa.Table, path: Path, label_range: tuple[float, float], with_condition: bool) -> pa.Table:
    """Text columns as non-empty strings (the condition null for STS), labels as float64 in range or null
    (unlabelled); other columns kept as they are."""
    columns = {}
    required = TEXT_COLUMNS if with_condition else ("sentence1", "sentence2")
    for name in TEXT_COLUMNS:
        column = table[name].cast(pa.string())
        if name in required:
            empty = column.null_count + (pc.sum(pc.equal(pc.utf8_trim_whitespace(column), "")).as_py() or 0)
            if empty:
                raise UserError(f"{path}: column {name} has {empty} empty value(s)")
        columns[name] = column
    try:
        labels = table["label"].cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise UserError(f"{path}: column label is not numeric") from None
    columns["label"] = _check_labels(labels, path, label_range)
    rest = {name: table[name] for name in table.column_names if name not in columns}
    return pa.table({**columns, **rest})


def _check_labels(labels: pa.ChunkedArray, path: Path, label_range: tuple[float, float]) -> pa.ChunkedArray:
    """A split is labelled (every label in range) or unlabelled (every label null or -1, as the authors' test)."""
    values = labels.to_numpy(zero_copy_only=False).astype(np.float64)
    hidden = np.isnan(values) | (values == HIDDEN_LABEL)
    if hidden.all():
        return pa.chunked_array([pa.nulls(len(values), pa.float64())])
    if hidden.any():
        row = int(np.flatnonzero(hidden)[0])
        raise UserError(f"{path}: row {row + 1} has no label while other rows have one; label every row or none")
    low, high = label_range
    bad = (values < low) | (values > high)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise UserError(f"{path}: label {values[row]:g} in row {row + 1} is outside {low:g}-{high:g}")
    return labels


@dataclass(frozen=True)
class QuadPairing:
    """The Quad objective's pairs and what pairing them found: `pairs` holds row indices [n_pairs, 2] as
    (high, low). `tied`: pairs with the same label under both conditions (trained on; the tie broken by
    `condition_type`, else file order). `contradicted`: pairs whose higher label sits on the `condition_type ==
    'low'` row (raters disagreeing with the writer). `dropped_groups`/`dropped_rows`: sentence pairs without
    exactly two rows, left out."""

    pairs: np.ndarray
    tied: int = 0
    contradicted: int = 0
    dropped_groups: int = 0
    dropped_rows: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "quad_pairs": len(self.pairs),
            "quad_tied_pairs": self.tied,
            "quad_contradicted_pairs": self.contradicted,
            "quad_dropped_groups": self.dropped_groups,
            "quad_dropped_rows": self.dropped_rows,
        }


def quad_pairs(data: PairData, strict: bool = False) -> QuadPairing:
    """Pair each sentence pair's two rows, the higher label first, as the authors' sampler does (a stable sort by
    label, descending): the label decides, `condition_type` only breaks a tie, then file order. Rows group by
    `pair_id` when the source has it, else by (sentence1, sentence2); groups without exactly two rows are dropped
    and counted. `strict` (--strict-pairs) refuses such groups and ties instead."""
    if not data.labelled:
        raise UserError(f"{data.source}: the Quad objective needs labels to tell high from low")
    codes = _group_codes(data)
    counts = np.bincount(codes)
    incomplete = counts != 2
    if strict and incomplete.any():
        group = int(np.flatnonzero(incomplete)[0])
        rows = np.flatnonzero(codes == group)
        raise UserError(
            f"{data.source}: --strict-pairs: the Quad objective needs each sentence pair exactly twice (a high- and "
            f"a low-similarity condition); {int(incomplete.sum())} pair(s) are not, e.g. {_describe(data, rows[0])} "
            f"appears {len(rows)} time(s) (rows {', '.join(str(r + 1) for r in rows[:5])})"
        )
    kept = np.flatnonzero(~incomplete[codes])
    if not len(kept):
        raise UserError(f"{data.source}: the Quad objective needs sentence pairs with two rows each; there are none")
    order = kept[np.argsort(codes[kept], kind="stable")]
    first, second = order[0::2], order[1::2]
    _check_same_sentences(data, first, second)
    labels = data.labels()
    tied = labels[first] == labels[second]
    if strict and tied.any():
        row = int(first[np.flatnonzero(tied)[0]])
        raise UserError(
            f"{data.source}: --strict-pairs: pair {_describe(data, row)} has the same label ({labels[row]:g}) under "
            "both conditions, so neither is the high-similarity one"
        )
    # Descending stable sort: the larger label first, a tie keeps file order (the first row is the high one).
    first_high = (labels[first] > labels[second]) | tied
    first_high, contradicted = _writer_intent(data, first, second, first_high, tied)
    pairs = np.stack([np.where(first_high, first, second), np.where(first_high, second, first)], axis=1)
    return QuadPairing(
        pairs=pairs,
        tied=int(tied.sum()),
        contradicted=contradicted,
        dropped_groups=int(incomplete.sum()),
        dropped_rows=int(counts[incomplete].sum()),
    )


def _writer_intent(
    data: PairData, first: np.ndarray, second: np.ndarray, first_high: np.ndarray, tied: np.ndarray
) -> tuple[np.ndarray, int]:
    """With a `condition_type` column (one 'high', one 'low' per pair): it breaks ties, and the pairs whose labels
    say the opposite of it are counted as contradicted. Without one, nothing changes."""
    if "condition_type" not in data.table.column_names:
        return first_high, 0
    kinds = np.array(data.table["condition_type"].to_pylist(), dtype=object)
    writer_first = kinds[first] == "high"
    typed = (writer_first & (kinds[second] == "low")) | ((kinds[first] == "low") & (kinds[second] == "high"))
    contradicted = int((typed & ~tied & (first_high != writer_first)).sum())
    return np.where(tied & typed, writer_first, first_high), contradicted


def _group_codes(data: PairData) -> np.ndarray:
    """A group number per row: its `pair_id` when every row has one, else its (sentence1, sentence2)."""
    table = data.table
    if "pair_id" in table.column_names and table["pair_id"].null_count == 0:
        key = table["pair_id"]
    else:
        key = pc.binary_join_element_wise(table["sentence1"], table["sentence2"], "\x00")
    return pc.dictionary_encode(key).combine_chunks().indices.to_numpy(zero_copy_only=False)


def _check_same_sentences(data: PairData, first: np.ndarray, second: np.ndarray) -> None:
    """Rows grouped by `pair_id` must hold the same sentences: pairing other rows would train on noise."""
    for name in ("sentence1", "sentence2"):
        texts = data.table[name].to_numpy(zero_copy_only=False)
        differs = texts[first] != texts[second]
        if differs.any():
            row = int(first[np.flatnonzero(differs)[0]])
            raise UserError(f"{data.source}: rows sharing pair_id {_describe(data, row)} have different {name}")


def _describe(data: PairData, row: int) -> str:
    s1, s2 = data.table["sentence1"][int(row)].as_py(), data.table["sentence2"][int(row)].as_py()
    return f"({_short(s1)!r}, {_short(s2)!r})"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class LabelScale:
    """Maps labels to [0, 1] for the cosine and MSE heads: (y - low) / (high - low)."""

    low: float
    high: float

    def __call__(self, labels: np.ndarray) -> np.ndarray:
        return (labels - self.low) / (self.high - self.low)


def label_scale(splits: list[PairData], low: float | None = None, high: float | None = None) -> LabelScale:
    """Observed min and max of the labelled splits, each overridable; every label must lie inside."""
    observed = [data.labels() for data in splits if data.labelled]
    values = np.concatenate(observed) if observed else np.zeros(0)
    if low is None or high is None:
        if not len(values):
            raise UserError("no labelled rows to take the label range from; give --min-label and --max-label")
        low = float(values.min()) if low is None else low
        high = float(values.max()) if high is None else high
    if not high > low:
        raise UserError(f"label range {low:g}-{high:g} is empty; give --min-label below --max-label")
    for data in splits:
        if data.labelled:
            outside = (data.labels() < low) | (data.labels() > high)
            if outside.any():
                value = data.labels()[np.flatnonzero(outside)[0]]
                raise UserError(f"{data.source}: label {value:g} is outside --min-label/--max-label {low:g}-{high:g}")
    return LabelScale(low, high)
