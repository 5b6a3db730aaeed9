"""Top-k neighbours by inner product on unit vectors. Exact: FAISS `IndexFlatIP` (the GPU index when FAISS has GPU
support and the device is CUDA) or chunked `torch.mm` + `topk`; approximate indexes (IVF, HNSW) live in
stages.mine.ann and share the `add`/`search` shape of these searchers."""

from __future__ import annotations

import numpy as np
import torch

from pipeline.errors import UserError


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


class TorchSearch:
    """Chunked `torch.mm` + `topk` in float32 on the device: exact, and often faster than FAISS on a GPU."""

    def __init__(self, dim: int, device: torch.device | None = None):
        self.device = device or torch.device("cpu")
        self.parts: list[torch.Tensor] = []
        self.base = torch.empty((0, dim))

    def add(self, vectors: np.ndarray) -> None:
        self.parts.append(torch.from_numpy(np.require(vectors, requirements="W")).to(self.device))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.parts:  # Arrow buffers are read-only, hence the copies above
            self.base = torch.cat([self.base.to(self.device), *self.parts])
            self.parts = []
        block = torch.from_numpy(np.require(queries, requirements="W")).to(self.device)
        scores, found = torch.topk(block @ self.base.T, k, dim=1, sorted=True)
        return scores.cpu().numpy(), found.cpu().numpy()


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


def exact_searcher(dim: int, device: torch.device, backend: str) -> FaissSearch | TorchSearch:
    return TorchSearch(dim, device) if backend == "torch" else FaissSearch.flat(dim, device)


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
    if k >= n:
        raise UserError(f"mine.k={k} needs more than {k} embedded images; this dataset has {n}")
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
