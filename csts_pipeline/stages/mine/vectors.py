"""The embed output read in blocks: query blocks of fixed global row ranges, assembled across shards, so that
memory holds one block (plus one shard) whatever the number of images."""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.shards import list_shards, read_table


def _vectors(table, dim: int, dtype: type = np.float32) -> np.ndarray:
    """Rows of an embeddings table (float32 or float16 as stored) as `dtype`, contiguous (FAISS and BLAS want
    them so)."""
    flat = table.column("embedding").combine_chunks().flatten().to_numpy()
    return np.ascontiguousarray(flat.reshape(-1, dim), dtype=dtype)


class EmbeddingShards:
    """`embed/embeddings/part-*.parquet`: image ids up front (small), vectors only block by block."""

    def __init__(self, folder: Path, paths: list[Path] | None = None):
        self.paths = list_shards(folder) if paths is None else paths
        if not self.paths:
            raise UserError(f"{folder}: no Parquet shards found (run the stage that writes them first)")
        ids = [read_table(path, ["image_id"]).column("image_id").to_numpy() for path in self.paths]
        self.shard_rows = [len(part) for part in ids]
        self.image_ids = np.concatenate(ids).astype(np.int64)
        kind = pq.read_schema(self.paths[0]).field("embedding").type
        self.dim = kind.list_size
        self.dtype = np.dtype(kind.value_type.to_pandas_dtype())  # as stored: float32 or float16

    @classmethod
    def of(cls, paths: list[Path]) -> EmbeddingShards:
        """These shards only, in this order (a part of the base: stages.mine.base_split)."""
        return cls(paths[0].parent, paths)

    def __len__(self) -> int:
        return len(self.image_ids)

    def shards(self, dtype: type = np.float32) -> Iterator[np.ndarray]:
        for path in self.paths:
            yield _vectors(read_table(path, ["embedding"]), self.dim, dtype)

    def all(self) -> np.ndarray:
        """Every vector, in row order, in one array (what the Ray executor's search tasks share)."""
        out = np.empty((len(self), self.dim), np.float32)
        lo = 0
        for vectors in self.shards():
            out[lo : lo + len(vectors)] = vectors
            lo += len(vectors)
        return out

    def blocks(self, size: int) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, vectors) of the global row ranges [0, size), [size, 2 size), ... whatever the shards."""
        pending: list[np.ndarray] = []
        held, lo = 0, 0
        for vectors in self.shards():
            pending.append(vectors)
            held += len(vectors)
            while held >= size:
                joined = np.concatenate(pending) if len(pending) > 1 else pending[0]
                yield lo, joined[:size]
                lo += size
                rest = joined[size:]
                pending, held = ([rest] if len(rest) else []), len(rest)
        if held:
            yield lo, np.concatenate(pending) if len(pending) > 1 else pending[0]

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of the given global rows, in the given order (reads every shard once)."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dim), np.float32)
        lo = 0
        for vectors in self.shards():
            hi = lo + len(vectors)
            inside = (rows >= lo) & (rows < hi)
            out[inside] = vectors[rows[inside] - lo]
            lo = hi
        return out


def row_runs(rows: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, end, first row) of each run of consecutive numbers in the sorted `rows`: positions [start, end) of
    `rows` hold rows first row ... first row + end - start - 1, so a run is one positioned read or write."""
    starts = np.flatnonzero(np.diff(rows, prepend=-2) != 1)
    ends = np.append(starts[1:], len(rows))
    return list(zip(starts.tolist(), ends.tolist(), rows[starts].tolist()))


def release_pages(array: np.ndarray) -> None:
    """Give back the pages a read-only memory map (`np.load(mmap_mode="r")`) has read: they stay in the page cache,
    but no longer count as this process's memory. Reading all the neighbour lists of 10M images through their maps
    would otherwise add 5 GB to the stage's peak; read back, a page costs a minor fault."""
    mapped = array.base
    if isinstance(mapped, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        mapped.madvise(mmap.MADV_DONTNEED)
