"""The input of the annotate round trip: its upstream stage's kept pairs (`UPSTREAM`, filter's spec: annotate's
one declared dependency on another stage), as shards or one Parquet/CSV file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import file_fingerprint, fingerprint, require_record
from csts_pipeline.pipeline.schemas import KEPT, PROVENANCE
from csts_pipeline.pipeline.shards import list_shards, read_table
from csts_pipeline.stages.annotate.layout import KEPT_COLUMNS
from csts_pipeline.stages.filter import SPEC as UPSTREAM


@dataclass
class KeptSource:
    """The filter stage's kept pairs: shards or one Parquet/CSV file, identified by `fingerprint`."""

    files: list[Path]
    fingerprint: str

    @property
    def name(self) -> Path:
        """What error messages call the input: the file, or the folder of the shards."""
        return self.files[0] if len(self.files) == 1 else self.files[0].parent

    def read(self, columns: tuple[str, ...]) -> tuple[pa.Table, np.ndarray]:
        """All files' `columns` concatenated, and each file's first row in the concatenation."""
        tables = [read_kept_file(path, columns) for path in self.files]
        offsets = np.cumsum([0] + [t.num_rows for t in tables])
        return pa.concat_tables(tables), offsets

    def take(self, offsets: np.ndarray, rows: np.ndarray) -> pa.Table:
        """The full kept columns of `rows` (indices into the concatenation), in the order given; reads only the
        files that hold them, so sampling a few pairs from many shards stays cheap."""
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        owner = np.searchsorted(offsets, sorted_rows, side="right") - 1
        parts = [
            read_kept_file(self.files[f], KEPT_COLUMNS).take(pa.array(sorted_rows[owner == f] - offsets[f]))
            for f in np.unique(owner)
        ]
        return pa.concat_tables(parts).take(pa.array(np.argsort(order)))


def kept_source(work_dir: Path | None, input_path: Path | None) -> KeptSource:
    """`--input` (a kept folder, a Parquet or a CSV file), else `<work_dir>/filter/kept/` of a finished filter."""
    if input_path is None:
        if work_dir is None:
            raise UserError("give --dataset/--manifest (to read <work_dir>/filter/kept/) or --input PATH")
        record = require_record(work_dir / UPSTREAM.name, UPSTREAM.name)
        files = list_shards(work_dir / UPSTREAM.name / KEPT)
        if not files:
            raise UserError(f"{work_dir / UPSTREAM.name / KEPT}: no kept shards (the filter kept no pairs?)")
        return KeptSource(files, record["fingerprint"])
    if input_path.is_dir():
        files = list_shards(input_path)
        if not files:
            raise UserError(f"{input_path}: no part-*.parquet shards in this folder")
    elif input_path.is_file() and input_path.suffix in (".parquet", ".csv"):
        files = [input_path]
    else:
        raise UserError(f"{input_path}: expected a folder of kept shards, a .parquet or a .csv file")
    return KeptSource(files, fingerprint([(p.name, file_fingerprint(p)) for p in files]))


def read_kept_file(path: Path, columns: tuple[str, ...]) -> pa.Table:
    """`columns` of one kept file; a missing column is a UserError naming the file."""
    if path.suffix == ".csv":
        table = _read_kept_csv(path)
        present = table.column_names
    else:
        try:
            present = pq.read_schema(path).names
        except (pa.ArrowInvalid, OSError) as exc:
            raise UserError(f"{path}: not a readable Parquet file ({exc})") from None
        table = None
    missing = [name for name in columns if name not in present]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)} (filter's kept schema, docs/schemas.md)")
    return table.select(list(columns)) if table is not None else read_table(path, list(columns))


def _read_kept_csv(path: Path) -> pa.Table:
    """A kept-pairs CSV with the kept schema's types, so ids stay int64 and empty sentences stay strings."""
    types = {name: pa.string() for name in ("sentence1", "sentence2")}
    types |= {name: pa.int64() for name in PROVENANCE} | {"image_cosine": pa.float64(), "iou": pa.float64()}
    try:
        return pacsv.read_csv(
            path,
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not a readable kept-pairs CSV ({str(exc).splitlines()[0]})") from None
