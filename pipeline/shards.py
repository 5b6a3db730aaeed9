"""Parquet shard I/O: the one way stages write and read their outputs.

A shard is written under a temporary name and renamed when complete, so a crash never leaves a half-written
`part-*.parquet` behind; readers only ever see finished shards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import UserError

SHARD_GLOB = "part-*.parquet"


def shard_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def write_table(table: pa.Table, path: Path) -> None:
    """Write atomically: `path.tmp` first, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def list_shards(folder: Path) -> list[Path]:
    return sorted(folder.glob(SHARD_GLOB))


def read_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    """Read one Parquet file; a missing or unreadable file is a user-facing error naming it."""
    if not path.is_file():
        raise UserError(f"{path}: not found (run the stage that writes it first)")
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise UserError(f"{path}: not a readable Parquet file ({exc})") from None


def read_shards(folder: Path, columns: list[str] | None = None) -> pa.Table:
    """All shards of a folder as one table, in shard order."""
    shards = list_shards(folder)
    if not shards:
        raise UserError(f"{folder}: no Parquet shards found (run the stage that writes them first)")
    return pa.concat_tables([read_table(p, columns) for p in shards])


def iter_shards(folder: Path, columns: list[str] | None = None) -> Iterator[tuple[Path, pa.Table]]:
    """Shards one at a time, so memory stays bounded by the largest shard."""
    shards = list_shards(folder)
    if not shards:
        raise UserError(f"{folder}: no Parquet shards found (run the stage that writes them first)")
    for path in shards:
        yield path, read_table(path, columns)


def remove_tmp_files(folder: Path) -> None:
    """Leftovers of a crashed write; the shard they belonged to is recomputed."""
    for tmp in folder.rglob("*.tmp"):
        tmp.unlink()
