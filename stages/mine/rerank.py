"""Exact re-ranking of a compressed index's candidates with the full vectors, read from a memory map on disk.

A compressed index (IVF-SQ8, IVF-PQ) ranks by approximate scores; `RerankSearch` asks it for `candidates` per
query, then scores those candidates exactly (float32 inner products of the stored vectors, float16 or float32 as
the embed stage wrote them) and keeps the top k. So the top-k returned is exact on the candidate set, and recall
is lost only where a true neighbour is not among the candidates. The full vectors are copied once, shard by shard,
into `vectors.npy` in the staging folder while the index is filled (`VectorFile`); each re-ranking chunk maps the
file, gathers its candidates' rows and unmaps it, so the pages it touched leave the process's resident memory.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stages.mine.budget import RERANK_CHUNK


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
        for lo in range(0, len(queries), RERANK_CHUNK):
            hi = min(len(queries), lo + RERANK_CHUNK)
            scores[lo:hi], ids[lo:hi] = rerank(queries[lo:hi], found[lo:hi], self.vectors, k)
        return scores, ids


def rerank(queries: np.ndarray, found: np.ndarray, vectors: Path, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of each query's candidate ids `found` (-1: none) by exact inner product with the stored rows."""
    base = np.load(vectors, mmap_mode="r")
    unique, inverse = np.unique(np.where(found >= 0, found, 0), return_inverse=True)
    rows = np.asarray(base[unique], np.float32)  # sorted rows: one pass over the file's pages
    del base
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
