"""The annotate files in the crowd platforms' formats, each written by the one atomic writer
(pipeline.shards.write_atomic: a hidden temporary name, renamed when complete); and reading back the stage's own
task files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import write_json
from csts_pipeline.pipeline.shards import write_atomic, write_table

__all__ = ["read_jsonl", "write_csv", "write_json", "write_jsonl", "write_parquet"]


def write_parquet(table: pa.Table, path: Path) -> None:
    write_table(table, path)


def write_csv(table: pa.Table, path: Path) -> None:
    """Strings quoted only where needed, as spreadsheet tools and MTurk's batch upload expect."""
    write_atomic(path, lambda handle: pacsv.write_csv(table, handle, pacsv.WriteOptions(quoting_style="needed")))


def write_jsonl(records: list[dict[str, Any]], path: Path) -> None:
    blob = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode()
    write_atomic(path, lambda handle: handle.write(blob))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """One of this stage's own task files (trusted: written by an export step), its lines parsed as one JSON array
    (one parser call, not one a line)."""
    if not path.is_file():
        raise UserError(f"{path}: not found (run the export step that writes it first)")
    lines = [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    return json.loads("[" + ",".join(lines) + "]")
