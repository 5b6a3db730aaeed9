"""Results rows as columns, so the ratings screen checks 600,000 rows with array operations instead of a Python
call per row and field (issue 60: reading and screening were most of a large import's time).

A plain or batch-results CSV is read straight into columns (`csv_columns`); any other results file (JSONL, a
Label Studio export) is read by its platform as `ResultRow`s and turned into columns (`columns_of`). A text is
normalised as `results.one_line` does, and a value parsed as `results.parse_rating`/`parse_flag` do, once per
distinct value (`per_value`): a batch holds a few thousand workers and five ratings."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.crowd.results import Problem, ResultRow, one_line

ColumnsRead = tuple["ResultColumns", list[Problem], set[str]]  # columns, rows left out, the file's field names
# printable ASCII but the space: a text made only of these is its own one_line (nothing to collapse or strip)
_NOT_PLAIN = r"[^!-~]"


@dataclass
class ResultColumns:
    """The rows of one or more results files as columns: per row its file (an index into `files`) and its row
    number there; `fields` and `posted` as ResultRow's, one object array per name (None where a row lacks it)."""

    files: list[Path]
    file: np.ndarray
    row: np.ndarray
    fields: dict[str, np.ndarray]
    posted: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.row)

    def column(self, name: str, posted: bool = False) -> np.ndarray:
        """The values of `name` (None for every row when no row has it)."""
        found = (self.posted if posted else self.fields).get(name)
        return np.full(len(self), None, object) if found is None else found

    def where(self, at: int) -> str:
        """Row `at` as the report and the details name it (`file:row`)."""
        return f"{self.files[self.file[at]].name}:{self.row[at]}"


def objects(values: Iterable[Any], count: int) -> np.ndarray:
    """An object array of `values` as given (a list stays one element, as np.array would not keep it)."""
    return np.fromiter(values, dtype=object, count=count)


def columns_of(path: Path, rows: list[ResultRow]) -> ResultColumns:
    """A platform's `ResultRow`s as columns (the path for files other than CSV)."""
    names = dict.fromkeys(name for row in rows for name in row.fields)
    posted = dict.fromkeys(name for row in rows for name in row.posted)
    n = len(rows)
    return ResultColumns(
        [path],
        np.zeros(n, np.int64),
        np.array([row.row for row in rows], np.int64),
        {name: objects((row.fields.get(name) for row in rows), n) for name in names},
        {name: objects((row.posted.get(name) for row in rows), n) for name in posted},
    )


def concat(parts: list[ResultColumns]) -> ResultColumns:
    """Several files' columns as one, in order (a name one file lacks is None on its rows)."""
    files = [path for part in parts for path in part.files]
    offsets = np.cumsum([0] + [len(part.files) for part in parts])
    joined = {}
    for kind in ("fields", "posted"):
        names = dict.fromkeys(name for part in parts for name in getattr(part, kind))
        joined[kind] = {name: np.concatenate([part.column(name, kind == "posted") for part in parts]) for name in names}
    file = np.concatenate([np.zeros(0, np.int64)] + [part.file + at for part, at in zip(parts, offsets)])
    row = np.concatenate([np.zeros(0, np.int64)] + [part.row for part in parts])
    return ResultColumns(files, file, row, joined["fields"], joined["posted"])


def csv_columns(path: Path, lines: Iterable[str], plan: Callable[[list[str]], tuple[dict, dict]]) -> ColumnsRead:
    """A CSV results file as columns, as the row reader (mturk._csv_rows) reads it: one row per record after the
    header, numbered from 2, blank records left out, a short record's missing fields empty. `plan`: the header's
    names to (field -> column index, posted -> column index), as mturk.row_fields maps them."""
    reader = csv.reader(lines, strict=True)  # strict: an unterminated quote is an error, not one long field
    try:
        header = next(reader, [])
        records = list(reader)
    except csv.Error as exc:
        raise UserError(f"{path}: line {reader.line_num}: not valid CSV ({exc}); nothing imported") from None
    width, keep = len(header), None
    if not set(map(len, records)) <= {width}:  # ragged records (rare): pad or cut each to the header
        keep = np.array([any(v.strip() for v in values) for values in records], bool)
        records = [(values + [""] * width)[:width] for values in records]
    by_column: list[np.ndarray] = []
    if records and width:  # the records' values in one list, then cut into columns (zip(*records) was slower)
        values = [value for values in records for value in values]
        keep = _not_blank(records, pa.array(values, pa.string()), width) if keep is None else keep
        table = objects(values, len(values)).reshape(len(records), width)
        by_column = [np.ascontiguousarray(table[:, i]) for i in range(width)]
    elif keep is None:
        keep = np.zeros(len(records), bool)
    at = np.flatnonzero(keep)
    fields_at, posted_at = plan(header)
    fields = {name: by_column[i][at] for name, i in fields_at.items()} if by_column else {}
    posted = {name: by_column[i][at] for name, i in posted_at.items()} if by_column else {}
    if not by_column:
        fields = {name: np.zeros(0, object) for name in fields_at}
    columns = ResultColumns([path], np.zeros(len(at), np.int64), at + 2, fields, posted)
    return columns, [], set(fields_at) | set(posted_at)


def _not_blank(records: list[list[str]], flat: pa.Array, width: int) -> np.ndarray:
    """Per record: some value is more than spaces (`flat`: the records' values in order, `width` a record). A value
    with a printable ASCII character other than the space says so at once; the few records without one are asked
    as the row reader asks (str.strip)."""
    shown = pc.fill_null(pc.match_substring_regex(flat, "[!-~]"), False).to_numpy(zero_copy_only=False)
    keep = shown.reshape(len(records), width).any(axis=1)
    for at in np.flatnonzero(~keep).tolist():
        keep[at] = any(v.strip() for v in records[at])
    return keep


def per_value(values: np.ndarray, fn: Callable[[Any], Any]) -> np.ndarray:
    """`fn` of each value, called once per distinct value (text values); per row for values of other types."""
    try:
        strings = pa.array(values, type=pa.string(), from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return objects(map(fn, values), len(values))
    encoded = pc.dictionary_encode(strings)
    uniques = encoded.dictionary.to_pylist()
    if encoded.null_count:
        uniques.append(None)  # fn(None) only where a row has no value
    found = objects(map(fn, uniques), len(uniques))
    return found[encoded.indices.fill_null(len(uniques) - 1).to_numpy(zero_copy_only=False)]


def texts(values: np.ndarray) -> np.ndarray:
    """results.one_line of each value: a text of printable ASCII without spaces is its own, the rest go through
    one_line."""
    try:
        strings = pa.array(values, type=pa.string(), from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return objects(map(one_line, values), len(values))
    odd = pc.fill_null(pc.match_substring_regex(strings, _NOT_PLAIN), True).to_numpy(zero_copy_only=False)
    if not odd.any():
        return values
    found = values.copy()
    found[odd] = objects(map(one_line, values[odd]), int(odd.sum()))
    return found


def first_of(codes: np.ndarray) -> np.ndarray:
    """Per row: the row where its code first appears (itself when it is the first)."""
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)]


def codes_of(values: np.ndarray) -> np.ndarray:
    """An int64 code per text value, equal where the texts are equal."""
    if len(values) == 0:
        return np.zeros(0, np.int64)
    encoded = pc.dictionary_encode(pa.array(values, type=pa.string(), from_pandas=False))
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
