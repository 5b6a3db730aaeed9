"""Exact top-k neighbours by inner product on unit vectors: FAISS `IndexFlatIP` (the GPU index when FAISS has GPU
support and the device is CUDA) or chunked `torch.mm` + `topk`."""

from __future__ import annotations

import numpy as np
import torch

from pipeline.errors import UserError


def require_faiss() -> None:
    """FAISS comes from an extra; without it, say which one instead of a ModuleNotFoundError traceback."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        raise UserError(
            "mine.knn=faiss needs FAISS: pip install 'csts-pipeline[cpu]' (faiss-cpu) or 'csts-pipeline[gpu]' "
            "(faiss-gpu-cu12), or run with --knn torch"
        ) from None


class _FaissSearch:
    """FAISS `IndexFlatIP` (exact), moved to the GPU when FAISS has GPU support and the device is CUDA."""

    def __init__(self, vectors: np.ndarray, device: torch.device):
        import faiss

        self.index = faiss.IndexFlatIP(vectors.shape[1])
        if device.type == "cuda" and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
            self.resources = faiss.StandardGpuResources()
            self.index = faiss.index_cpu_to_gpu(self.resources, device.index or 0, self.index)
        self.index.add(vectors)
        self.vectors = vectors

    def search(self, lo: int, hi: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(self.vectors[lo:hi], k)


class _TorchSearch:
    """Chunked `torch.mm` + `topk` in float32 on the device: exact, and often faster than FAISS on a GPU."""

    def __init__(self, vectors: np.ndarray, device: torch.device):
        self.base = torch.from_numpy(np.require(vectors, requirements="W")).to(device)  # Arrow buffers are read-only

    def search(self, lo: int, hi: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, found = torch.topk(self.base[lo:hi] @ self.base.T, k, dim=1, sorted=True)
        return scores.cpu().numpy(), found.cpu().numpy()


def exact_knn(
    vectors: np.ndarray,
    k: int,
    device: torch.device | None = None,
    query_batch: int = 8192,
    backend: str = "faiss",
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k neighbours of every row by inner product, the row itself excluded.

    Returns (neighbours [n, k] int64 row indices, scores [n, k] float32), best first. The self match is removed
    by index, not by position, so duplicated vectors cannot push it out of place.
    """
    n = vectors.shape[0]
    if k >= n:
        raise UserError(f"mine.k={k} needs more than {k} embedded images; this dataset has {n}")
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    device = device or torch.device("cpu")
    searcher = _TorchSearch(vectors, device) if backend == "torch" else _FaissSearch(vectors, device)
    neighbours = np.empty((n, k), np.int64)
    scores = np.empty((n, k), np.float32)
    for lo in range(0, n, query_batch):
        hi = min(n, lo + query_batch)
        found_scores, found = searcher.search(lo, hi, k + 1)
        is_self = found == np.arange(lo, hi)[:, None]
        # drop the self column where it appears, else the last (k+1-th) column
        drop = np.where(is_self.any(axis=1), is_self.argmax(axis=1), k)
        keep = np.ones_like(found, dtype=bool)
        keep[np.arange(hi - lo), drop] = False
        neighbours[lo:hi] = found[keep].reshape(hi - lo, k)
        scores[lo:hi] = found_scores[keep].reshape(hi - lo, k)
    return neighbours, scores
