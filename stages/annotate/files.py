"""Atomic writes of the annotate files, and reading back the stage's own task files.

A file is written under a hidden temporary name in its own folder (`.<name>.<pid>.tmp`) and renamed over the
target only when complete, so neither a reader nor an interrupted run ever sees half a file; the leading dot
makes dataset readers and `part-*`/`*.parquet` globs skip the temporary file."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipeline.errors import UserError


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A hidden temporary path to write; renamed to `path` when the block ends, removed if it fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_parquet(table: pa.Table, path: Path) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def write_csv(table: pa.Table, path: Path) -> None:
    """Strings quoted only where needed, as spreadsheet tools and MTurk's batch upload expect."""
    with atomic_path(path) as tmp:
        pacsv.write_csv(table, tmp, pacsv.WriteOptions(quoting_style="needed"))


def write_jsonl(records: list[dict[str, Any]], path: Path) -> None:
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def write_json(path: Path, value: Any) -> None:
    """Indented, keys sorted: the same layout as the stage records."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """One of this stage's own task files (trusted: written by an export step)."""
    if not path.is_file():
        raise UserError(f"{path}: not found (run the export step that writes it first)")
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
