"""Top-k neighbours by inner product on unit vectors. Exact: FAISS `IndexFlatIP` (the GPU index when FAISS has GPU
support and the device is CUDA) or chunked `torch.mm` + `topk`; approximate indexes (IVF, HNSW) live in
stages.mine.ann and share the `add`/`search` shape of these searchers."""

from __future__ import annotations

import numpy as np
import torch

from csts_pipeline.pipeline.errors import UserError

# PIECE_ROWS: base rows a tensor holds (shards are joined up to this); SCORE_BYTES: a query block's scores
from csts_pipeline.stages.mine.budget import PIECE_ROWS, SCORE_BYTES


def require_faiss(what: str = "mine.knn=faiss", alternative: str = ", or run with --knn torch") -> None:
    """FAISS comes from an extra; without it, say which one instead of a ModuleNotFoundError traceback."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        raise UserError(
            f"{what} needs FAISS: pip install 'csts-pipeline[cpu]' (faiss-cpu) or 'csts-pipeline[gpu]' "
            f"(faiss-gpu-cu12){alternative}"
        ) from None


def to_gpu(index, device: torch.device):
    """The FAISS GPU copy of `index` when FAISS has GPU support and the device is CUDA, else `index` itself."""
    import faiss

    if device.type == "cuda" and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        resources = faiss.StandardGpuResources()
        gpu_index = faiss.index_cpu_to_gpu(resources, device.index or 0, index)
        gpu_index.csts_resources = resources  # kept alive with the index
        return gpu_index
    return index


class FaissSearch:
    """Any FAISS index (exact `IndexFlatIP` by default), filled block by block with `add`."""

    def __init__(self, index, device: torch.device | None = None):
        self.index = to_gpu(index, device or torch.device("cpu"))

    @classmethod
    def flat(cls, dim: int, device: torch.device | None = None) -> FaissSearch:
        import faiss

        return cls(faiss.IndexFlatIP(dim), device)

    def add(self, vectors: np.ndarray) -> None:
        self.index.add(vectors)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(queries, k)


GROUP = 32  # columns per group in `top_k`'s first step


class TorchSearch:
    """Exact top-k by `torch.mm` and `top_k` over the base chunk by chunk, on the device. Scores are float32 sums of
    the products of the vectors as stored: a GPU keeps float16 shards as float16 (half the memory, the tensor
    cores) and accumulates in float32; the CPU computes in float32. Memory beyond the base: one query block's
    scores against one chunk (`SCORE_BYTES`), whatever the number of images."""

    def __init__(self, dim: int, device: torch.device | None = None, dtype: torch.dtype = torch.float32):
        self.device = device or torch.device("cpu")
        self.dtype = dtype if self.device.type == "cuda" else torch.float32
        self.pieces: list[torch.Tensor] = []
        self.pending: list[torch.Tensor] = []

    def add(self, vectors: np.ndarray) -> None:
        # Arrow buffers are read-only, hence the copy of those
        self.pending.append(torch.from_numpy(np.require(vectors, requirements="W")).to(self.device, self.dtype))
        if sum(len(part) for part in self.pending) >= PIECE_ROWS:
            self._join_pending()

    def _join_pending(self) -> None:
        if self.pending:
            self.pieces.append(torch.cat(self.pending) if len(self.pending) > 1 else self.pending[0])
            self.pending = []

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self._join_pending()
        block = torch.from_numpy(np.require(queries, requirements="W")).to(self.device, self.dtype)
        k = min(k, sum(len(piece) for piece in self.pieces))
        chunk = max(GROUP, SCORE_BYTES // (4 * max(1, len(block))) // GROUP * GROUP)
        best: tuple[torch.Tensor, torch.Tensor] | None = None
        first = 0
        for piece in self.pieces:
            for lo in range(0, len(piece), chunk):
                scores, found = top_k(_scores(block, piece[lo : lo + chunk]), k)
                best = running_top_k(best, (scores, found + (first + lo)), k)
            first += len(piece)
        if best is None:
            raise ValueError("search before any vectors were added")
        return best[0].cpu().numpy(), best[1].cpu().numpy()


def _scores(queries: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """queries x base.T in float32: half-precision inputs accumulate and come out in float32 (CUDA's `out_dtype`)."""
    if queries.dtype == torch.float32:
        return queries @ base.T
    try:
        return torch.mm(queries, base.T, out_dtype=torch.float32)
    except TypeError:  # a torch without `out_dtype` (before 2.8): the scores rounded to float16, then widened
        return (queries @ base.T).float()


def top_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, columns) of the k best columns of each row, best first. The k best lie in the k groups of `GROUP`
    columns with the best maxima, so the selection runs over the group maxima (one pass over the scores) and then
    over k x GROUP candidates: 1.08x `torch.topk` over every column on an H100 at 1M and 10M images, 0.95x on two
    CPU cores at 30,000, where the product dominates (bench/mine/exact_scale.py)."""
    rows, cols = scores.shape
    groups = cols // GROUP
    if groups <= 2 * k:
        return torch.topk(scores, min(k, cols), dim=1)
    body = groups * GROUP
    maxima = scores[:, :body].reshape(rows, groups, GROUP).amax(dim=2)
    chosen = torch.topk(maxima, k, dim=1).indices
    offsets = torch.arange(GROUP, device=scores.device)
    columns = (chosen[:, :, None] * GROUP + offsets).reshape(rows, k * GROUP)
    if body < cols:  # the columns after the last whole group are candidates too
        tail = torch.arange(body, cols, device=scores.device).expand(rows, cols - body)
        columns = torch.cat([columns, tail], dim=1)
    values, picked = torch.topk(scores.gather(1, columns), k, dim=1)
    return values, columns.gather(1, picked)


def running_top_k(
    best: tuple[torch.Tensor, torch.Tensor] | None, found: tuple[torch.Tensor, torch.Tensor], k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best of the running top-k and a chunk's top-k."""
    if best is None:
        return found
    scores, ids = torch.cat([best[0], found[0]], dim=1), torch.cat([best[1], found[1]], dim=1)
    values, picked = torch.topk(scores, min(k, scores.shape[1]), dim=1)
    return values, ids.gather(1, picked)


def drop_self(found: np.ndarray, scores: np.ndarray, query_rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """k of the k+1 results of each query (which is row `query_rows[i]`): the self match removed by index, not by
    position (duplicated vectors cannot push it out of place), else the last column. Missing results (-1) stay."""
    rows = found.shape[0]
    is_self = found == np.asarray(query_rows)[:, None]
    drop = np.where(is_self.any(axis=1), is_self.argmax(axis=1), k)
    keep = np.ones_like(found, dtype=bool)
    keep[np.arange(rows), drop] = False
    return found[keep].reshape(rows, k).astype(np.int64), scores[keep].reshape(rows, k).astype(np.float32)


def search_threads(backend: str) -> int:
    """The threads this process's CPU search uses (FAISS's OpenMP, or torch's)."""
    if backend == "torch":
        return torch.get_num_threads()
    import faiss

    return faiss.omp_get_max_threads()


def set_search_threads(backend: str, threads: int) -> None:
    """Search on `threads` threads: BLAS rounds a large block differently on another count, so a worker that
    must give the driver's bits searches on the driver's count."""
    if backend == "torch":
        torch.set_num_threads(threads)
        return
    import faiss

    faiss.omp_set_num_threads(threads)


def exact_searcher(
    dim: int, device: torch.device, backend: str, stored: np.dtype = np.dtype(np.float32)
) -> FaissSearch | TorchSearch:
    """FAISS's flat index, or `TorchSearch` (in float16 on a GPU when the vectors are stored so)."""
    if backend == "torch":
        return TorchSearch(dim, device, torch.float16 if stored == np.float16 else torch.float32)
    return FaissSearch.flat(dim, device)


def exact_knn(
    vectors: np.ndarray,
    k: int,
    device: torch.device | None = None,
    query_batch: int = 8192,
    backend: str = "faiss",
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k neighbours of every row by inner product, the row itself excluded.

    Returns (neighbours [n, k] int64 row indices, scores [n, k] float32), best first.
    """
    n = vectors.shape[0]
    if k >= n:  # the mine stage's plan refuses such a k first, naming mine.k
        raise ValueError(f"k={k} needs more than {k} vectors; there are {n}")
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    searcher = exact_searcher(vectors.shape[1], device or torch.device("cpu"), backend)
    searcher.add(vectors)
    neighbours = np.empty((n, k), np.int64)
    scores = np.empty((n, k), np.float32)
    for lo in range(0, n, query_batch):
        hi = min(n, lo + query_batch)
        found_scores, found = searcher.search(vectors[lo:hi], k + 1)
        neighbours[lo:hi], scores[lo:hi] = drop_self(found, found_scores, np.arange(lo, hi), k)
    return neighbours, scores
