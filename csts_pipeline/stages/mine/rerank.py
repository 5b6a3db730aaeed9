"""Exact re-ranking of a compressed index's candidates with the full vectors, read from a file on disk.

A compressed index (IVF-SQ8, IVF-PQ) ranks by approximate scores; `RerankSearch` asks it for `candidates` per
query, then scores those candidates exactly (float32 inner products of the stored vectors, float16 or float32 as
the embed stage wrote them) and keeps the top k. So the top-k returned is exact on the candidate set, and recall
is lost only where a true neighbour is not among the candidates. The full vectors are copied once, shard by shard,
into `vectors.npy` in the staging folder while the index is filled (`VectorFile`). A query block's candidates are
sorted by row, and the rows are read in order, `READ_ROWS` distinct rows at a time (`StoredRows`, so the file's
pages stay in the page cache, not in the process); a compiled kernel scores each row against every query that has
it as a candidate, widening float16 once a row. So a row is read once a block, however many queries want it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numba
import numpy as np

from csts_pipeline.stages.mine.budget import READ_ROWS, RERANK_PAIRS
from csts_pipeline.stages.mine.vectors import row_runs

MAP_BELOW = 0.02  # share of the file's rows from which a read goes through a memory map (bench/mine/rerank_reads.py)


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
        return rerank(queries, found, self.vectors, k)


class StoredRows:
    """Rows of an .npy file, in the stored dtype, read by number into a buffer reused from one read to the next.
    Sparse reads (under MAP_BELOW of the file's rows) take one positioned read (`preadv`) per run of consecutive
    rows, where a memory map faults about once a row; denser reads go through a map, unmapped at once, whose faults
    then bring in several wanted rows each (bench/mine/rerank_reads.py measures both). The pages read stay in the page
    cache, not in the process."""

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
        self.path, self.fd = path, os.open(path, os.O_RDONLY)

    def __enter__(self) -> StoredRows:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def read(self, rows: np.ndarray) -> np.ndarray:
        """The rows numbered `rows` (sorted, distinct) in the stored dtype, valid until the next read."""
        if len(rows) >= MAP_BELOW * self.rows:
            mapped = np.load(self.path, mmap_mode="r")
            out = np.asarray(mapped[rows])
            del mapped
            return out
        if len(rows) > len(self.raw):
            self.raw = np.empty((len(rows), self.dim), self.dtype)
        view = memoryview(self.raw).cast("B")
        for start, end, row in row_runs(rows):
            size = (end - start) * self.row_bytes
            if (
                os.preadv(
                    self.fd, [view[start * self.row_bytes : end * self.row_bytes]], self.offset + row * self.row_bytes
                )
                != size
            ):
                raise OSError(f"{self.path}: short read at row {row} (the file is truncated)")
        return self.raw[: len(rows)]


def rerank(queries: np.ndarray, found: np.ndarray, vectors: Path | StoredRows, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of each query's candidate ids `found` (-1: none) by exact inner product with the stored rows, in
    parts of at most `RERANK_PAIRS` (query, candidate) pairs, so memory does not grow with the candidates."""
    if isinstance(vectors, Path):
        with StoredRows(vectors) as stored:
            return rerank(queries, found, stored, k)
    scores = np.full((len(found), k), -np.inf, np.float32)
    ids = np.full((len(found), k), -1, np.int64)
    width = min(k, found.shape[1])
    step = max(1, RERANK_PAIRS // max(1, found.shape[1]))
    for lo in range(0, len(found), step):
        part = found[lo : lo + step]
        exact = candidate_scores(np.ascontiguousarray(queries[lo : lo + step], np.float32), part, vectors)
        top = np.argpartition(-exact, width - 1, axis=1)[:, :width]
        top = np.take_along_axis(top, np.argsort(-np.take_along_axis(exact, top, 1), axis=1, kind="stable"), 1)
        best = np.take_along_axis(exact, top, 1)
        scores[lo : lo + step, :width] = best
        ids[lo : lo + step, :width] = np.where(np.isfinite(best), np.take_along_axis(part, top, 1), -1)
    return scores, ids


def candidate_scores(queries: np.ndarray, found: np.ndarray, stored: StoredRows) -> np.ndarray:
    """Inner products of each query with each of its candidates (-inf where `found` is -1): the (query, candidate)
    pairs sorted by row, the distinct rows read in order, `READ_ROWS` at a time, and scored by `_row_dots`."""
    flat = found.ravel()
    order = pairs_by_row(flat)
    rows = flat[order]
    firsts = np.flatnonzero(np.diff(rows, prepend=-1) != 0)  # each distinct row's first pair in `order`
    bounds = np.append(firsts, len(order))
    exact = np.full(flat.shape, -np.inf, np.float32)
    for lo in range(0, len(firsts), READ_ROWS):
        hi = min(len(firsts), lo + READ_ROWS)
        block = stored.read(rows[firsts[lo:hi]])
        half = block.dtype == np.float16  # widened bit by bit in the kernel: numba has no float16
        bits = block.view(np.uint16) if half else np.empty((0, 0), np.uint16)
        wide = np.empty((0, 0), np.float32) if half else np.ascontiguousarray(block, np.float32)
        _row_dots(bits, wide, bounds[lo : hi + 1], order, queries, width=found.shape[1], out=exact)
    return exact.reshape(found.shape)


def pairs_by_row(flat: np.ndarray) -> np.ndarray:
    """Places in `flat` of its rows (-1: none, left out), sorted by row, in place order within a row: what a stable
    argsort gives, by a counting sort into buckets of rows and a sort within each (`_bucket_sort`), which took
    0.44 s for a block's 2^24 pairs where numpy's stable argsort took 2.26 (bench/mine/pair_sort.py, 10M rows, 2
    cores)."""
    top = int(flat.max(initial=-1))
    if top < 0:
        return np.zeros(0, np.int64)
    wanted = max(1, len(flat) // 16)  # buckets of about 16 pairs: one counter a bucket, small sorts
    shift = max(0, (top + 1).bit_length() - wanted.bit_length())
    return _bucket_sort(np.ascontiguousarray(flat, np.int64), shift, (top >> shift) + 1)


@numba.njit(cache=True, parallel=True)
def _bucket_sort(flat, shift, buckets):  # pragma: no cover (compiled)
    """`pairs_by_row`: places counted and scattered by bucket (row >> shift) in place order, then each bucket's
    places sorted by row, stably, in parallel."""
    counts = np.zeros(buckets + 1, np.int64)
    for place in range(flat.shape[0]):
        if flat[place] >= 0:
            counts[(flat[place] >> shift) + 1] += 1
    starts = np.cumsum(counts)
    order = np.empty(starts[-1], np.int64)
    free = starts[:-1].copy()
    for place in range(flat.shape[0]):
        if flat[place] >= 0:
            bucket = flat[place] >> shift
            order[free[bucket]] = place
            free[bucket] += 1
    for bucket in numba.prange(buckets):
        lo, hi = starts[bucket], starts[bucket + 1]
        if hi - lo > 1:
            places = order[lo:hi].copy()
            order[lo:hi] = places[np.argsort(flat[places], kind="mergesort")]
    return order


@numba.njit(cache=True, parallel=True, fastmath=True)
def _row_dots(bits, wide, bounds, order, queries, width, out):  # pragma: no cover (compiled)
    """out[pair] = row . query for the pairs `order[bounds[u]:bounds[u + 1]]` of each row u of the read (float16
    `bits` or float32 `wide`); a pair is query * width + candidate."""
    rows = bits.shape[0] if bits.shape[0] else wide.shape[0]
    dim = queries.shape[1]
    step = 1024  # rows a parallel iteration takes, with one widening buffer
    for first in numba.prange((rows + step - 1) // step):
        row = np.empty(dim, np.float32)
        for u in range(first * step, min(rows, (first + 1) * step)):
            if bits.shape[0]:
                _widen_half(bits[u], row)
            else:
                row[:] = wide[u]
            for p in range(bounds[u], bounds[u + 1]):
                pair = order[p]
                query = queries[pair // width]
                total = np.float32(0.0)
                for d in range(dim):
                    total += row[d] * query[d]
                out[pair] = total


@numba.njit(cache=True, inline="always")
def _widen_half(half, out):  # pragma: no cover (compiled)
    """IEEE half-precision bits to float32: exponent rebased for normal numbers, then zeros, subnormals and
    infinities/NaN fixed up (rare in unit vectors; a second pass keeps the first one vectorisable)."""
    bits = out.view(np.uint32)
    for d in range(half.shape[0]):
        h = np.uint32(half[d])
        bits[d] = ((h & 0x8000) << 16) | ((((h >> 10) & 0x1F) + 112) << 23) | ((h & 0x3FF) << 13)
    for d in range(half.shape[0]):
        h = np.uint32(half[d])
        exponent = (h >> 10) & 0x1F
        if exponent == 0:
            value = np.float32(h & 0x3FF) * np.float32(2.0**-24)
            out[d] = -value if h & 0x8000 else value
        elif exponent == 31:
            bits[d] = ((h & 0x8000) << 16) | 0x7F800000 | ((h & 0x3FF) << 13)
