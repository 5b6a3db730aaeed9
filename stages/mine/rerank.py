"""Exact re-ranking of a compressed index's candidates with the full vectors, read from a file on disk.

A compressed index (IVF-SQ8, IVF-PQ) ranks by approximate scores; `RerankSearch` asks it for `candidates` per
query, then scores those candidates exactly (float32 inner products of the stored vectors, float16 or float32 as
the embed stage wrote them) and keeps the top k. So the top-k returned is exact on the candidate set, and recall
is lost only where a true neighbour is not among the candidates. The full vectors are copied once, shard by shard,
into `vectors.npy` in the staging folder while the index is filled (`VectorFile`); each re-ranking chunk reads its
candidates' rows from the file (`StoredRows`), so the file's pages stay in the page cache, not in the process.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from stages.mine.budget import RERANK_CHUNK

MAP_BELOW = 0.02  # share of the file's rows from which a read goes through a memory map (bench/rerank_reads.py)


class VectorFile:
    """`path` (.npy of n x dim rows) written in order, block by block, by plain file writes (not a memory map,
    whose dirty pages would count as the process's memory)."""

    def __init__(self, path: Path, n: int, dim: int, dtype: np.dtype):
        path.parent.mkdir(parents=True, exist_ok=True)
        header = np.lib.format.open_memmap(path, "w+", dtype, (n, dim))
        self.offset, self.path, self.dtype = header.offset, path, np.dtype(dtype)
        del header
        self.handle = open(path, "r+b")  # noqa: SIM115 (closed by `close`)
        self.handle.seek(self.offset)

    def add(self, vectors: np.ndarray) -> None:
        self.handle.write(np.ascontiguousarray(vectors, self.dtype).tobytes())

    def close(self) -> None:
        self.handle.close()


class RerankSearch:
    """A FAISS index searched for `candidates` per query, re-ranked exactly from `vectors` (an .npy file)."""

    def __init__(self, index, vectors: Path, candidates: int):
        self.index, self.vectors, self.candidates = index, vectors, candidates

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids) best first, as FAISS returns them; -1 and -inf where fewer than k candidates exist."""
        _, found = self.index.search(queries, max(k, self.candidates))
        scores = np.full((len(queries), k), -np.inf, np.float32)
        ids = np.full((len(queries), k), -1, np.int64)
        with StoredRows(self.vectors) as stored:
            for lo in range(0, len(queries), RERANK_CHUNK):
                hi = min(len(queries), lo + RERANK_CHUNK)
                scores[lo:hi], ids[lo:hi] = rerank(queries[lo:hi], found[lo:hi], stored, k)
        return scores, ids


class StoredRows:
    """Rows of an .npy file read by number into buffers reused from one read to the next. Sparse reads (under
    MAP_BELOW of the file's rows) take one positioned read (`preadv`) per run of consecutive rows, where a memory
    map faults about once a row (bench/rerank_reads.py, 10M rows: 1.5 ms a query read, 1.8 to 1.9 ms mapped, and
    5.3 ms mapped right after the file was written); the pages read stay in the page cache, not in the process.
    Denser reads go through a map, unmapped at once, whose faults then bring in several wanted rows each (2M rows:
    1.0 ms mapped, 1.4 ms read)."""

    def __init__(self, path: Path):
        with open(path, "rb") as handle:  # the header alone: a truncated file is named by the read that misses
            version = np.lib.format.read_magic(handle)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            (self.rows, self.dim), _, self.dtype = read_header(handle)
            self.offset = handle.tell()
        self.row_bytes = self.dim * self.dtype.itemsize
        self.raw = np.empty((0, self.dim), self.dtype)
        self.wide = np.empty((0, self.dim), np.float32)
        self.path, self.fd = path, os.open(path, os.O_RDONLY)

    def __enter__(self) -> StoredRows:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def read(self, rows: np.ndarray) -> np.ndarray:
        """The float32 rows numbered `rows` (sorted, distinct), valid until the next read."""
        if len(rows) >= MAP_BELOW * self.rows:
            mapped = np.load(self.path, mmap_mode="r")
            wide = np.asarray(mapped[rows], np.float32)
            del mapped
            return wide
        if len(rows) > len(self.raw):
            self.raw = np.empty((len(rows), self.dim), self.dtype)
            self.wide = np.empty((len(rows), self.dim), np.float32)
        view = memoryview(self.raw).cast("B")
        starts = np.flatnonzero(np.diff(rows, prepend=-2) != 1)
        ends = np.append(starts[1:], len(rows))
        for start, end, row in zip(starts.tolist(), ends.tolist(), rows[starts].tolist()):
            size = (end - start) * self.row_bytes
            if (
                os.preadv(
                    self.fd, [view[start * self.row_bytes : end * self.row_bytes]], self.offset + row * self.row_bytes
                )
                != size
            ):
                raise OSError(f"{self.path}: short read at row {row} (the file is truncated)")
        wide = self.wide[: len(rows)]
        np.copyto(wide, self.raw[: len(rows)])
        return wide


def rerank(queries: np.ndarray, found: np.ndarray, vectors: Path | StoredRows, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of each query's candidate ids `found` (-1: none) by exact inner product with the stored rows."""
    if isinstance(vectors, Path):
        with StoredRows(vectors) as stored:
            return rerank(queries, found, stored, k)
    unique, inverse = np.unique(np.where(found >= 0, found, 0), return_inverse=True)
    rows = vectors.read(unique)  # sorted rows: one pass over the file
    gathered = rows[inverse.reshape(found.shape)]  # queries x candidates x dim
    exact = np.matmul(gathered, np.asarray(queries, np.float32)[:, :, None])[:, :, 0]
    exact[found < 0] = -np.inf
    width = min(k, found.shape[1])
    top = np.argpartition(-exact, width - 1, axis=1)[:, :width]
    top_scores = np.take_along_axis(exact, top, 1)
    order = np.argsort(-top_scores, axis=1, kind="stable")
    top = np.take_along_axis(top, order, 1)
    scores = np.full((len(found), k), -np.inf, np.float32)
    ids = np.full((len(found), k), -1, np.int64)
    scores[:, :width] = np.take_along_axis(exact, top, 1)
    ids[:, :width] = np.where(np.isfinite(scores[:, :width]), np.take_along_axis(found, top, 1), -1)
    return scores, ids
