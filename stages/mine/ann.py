"""Approximate neighbours with measured recall: FAISS IVF-Flat and HNSW, tuned on a seeded query sample.

Every approximate run draws `mine.recall_sample` query rows, computes their exact top-k by streaming over the
embedding shards (one block in memory), and raises nprobe (IVF) or efSearch (HNSW) by doubling until the
approximate top-k overlaps the exact one by `mine.recall_target` on average. The chosen parameter, the recall
reached and every step tried go into mine's `_stage.json` (`search`), so a reader can see what the pairs cost in
recall. Choosing `auto`: docs/mine.md (exact below `mine.exact_below` images, measured there).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.manifest import MineConfig
from stages.mine.vectors import EmbeddingShards

if TYPE_CHECKING:  # torch only when an index is built: plan() (and `status`) resolve the index without it
    import torch

    from stages.mine.knn import FaissSearch

MAX_EF_SEARCH = 4096


def resolve_index(config: MineConfig, n_images: int) -> str:
    """exact, ivf or hnsw; `auto` is exact below `exact_below` images, where exact search is quicker than building
    and tuning an index, and IVF above."""
    if config.index != "auto":
        return config.index
    return "exact" if n_images < config.exact_below else "ivf"


def ivf_lists(n_images: int, configured: int | None) -> int:
    """About sqrt(N) inverted lists (FAISS's rule of thumb), with at least 39 training points each."""
    if configured is not None:
        return max(1, min(configured, n_images // 39 or 1))
    return max(1, min(round(math.sqrt(n_images)), n_images // 39 or 1))


def build_index(kind: str, shards: EmbeddingShards, config: MineConfig, device: torch.device) -> FaissSearch:
    """An IVF-Flat (trained on a seeded sample of up to 64 points per list) or HNSW index holding every vector."""
    import faiss

    from stages.mine.knn import FaissSearch

    dim = shards.dim
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = config.hnsw_ef_construction
    else:
        lists = ivf_lists(len(shards), config.ivf_lists)
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, lists, faiss.METRIC_INNER_PRODUCT)
        index.cp.niter = 10
        index.cp.seed = config.seed
        rng = np.random.default_rng(config.seed)
        sample = np.sort(rng.choice(len(shards), min(len(shards), 64 * lists), replace=False))
        index.train(shards.rows(sample))
    searcher = FaissSearch(index, device if kind == "ivf" else None)  # FAISS has no GPU HNSW
    for vectors in shards.shards():
        searcher.add(vectors)
    return searcher


def exact_top_k(shards: EmbeddingShards, rows: np.ndarray, k: int, block: int = 16_384) -> np.ndarray:
    """Exact top-k rows of the sample queries `rows` (self excluded), streaming over the shards."""
    queries = shards.rows(rows)
    best_scores = np.full((len(rows), k), -np.inf, np.float32)
    best = np.full((len(rows), k), -1, np.int64)
    for lo, vectors in shards.blocks(block):
        sims = queries @ vectors.T
        own = (rows >= lo) & (rows < lo + len(vectors))
        sims[np.flatnonzero(own), rows[own] - lo] = -np.inf
        scores = np.concatenate([best_scores, sims], axis=1)
        found = np.concatenate([best, np.broadcast_to(np.arange(lo, lo + len(vectors)), sims.shape)], axis=1)
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        best_scores, best = np.take_along_axis(scores, top, 1), np.take_along_axis(found, top, 1)
    return best


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean share of each query's exact top-k that the approximate top-k holds."""
    k = truth.shape[1]
    hits = (found[:, :, None] == truth[:, None, :]).any(axis=1) & (truth >= 0)
    return float(hits.sum(axis=1).mean() / k)


def _set_parameter(searcher: FaissSearch, kind: str, value: int) -> None:
    import faiss

    name = "efSearch" if kind == "hnsw" else "nprobe"
    space = faiss.GpuParameterSpace() if "Gpu" in type(searcher.index).__name__ else faiss.ParameterSpace()
    space.set_index_parameter(searcher.index, name, value)


def tune(searcher: FaissSearch, kind: str, shards: EmbeddingShards, config: MineConfig) -> dict[str, Any]:
    """Raise nprobe / efSearch until recall@k on the seeded sample reaches the target (or the parameter its
    ceiling); the searcher is left at the chosen value. Returns what goes into the stage record."""
    from stages.mine.knn import drop_self

    started = time.perf_counter()
    k = config.k
    rng = np.random.default_rng(config.seed + 1)
    rows = np.sort(rng.choice(len(shards), min(len(shards), config.recall_sample), replace=False))
    truth = exact_top_k(shards, rows, k)
    queries = shards.rows(rows)
    name, value = ("efSearch", k + 1) if kind == "hnsw" else ("nprobe", 1)
    ceiling = MAX_EF_SEARCH if kind == "hnsw" else searcher.index.nlist
    tried = []
    while True:
        _set_parameter(searcher, kind, value)
        scores, found = searcher.search(queries, k + 1)
        found = drop_self(found, scores, rows, k)[0]
        recall = recall_at_k(found, truth)
        tried.append({name: value, "recall": round(recall, 4)})
        if recall >= config.recall_target or value >= ceiling:
            break
        value = min(ceiling, value * 2)
    record = {"index": kind, name: value, "recall_at_k": round(recall, 4), "recall_target": config.recall_target}
    record |= {"recall_sample": len(rows), "tried": tried, "tune_seconds": round(time.perf_counter() - started, 3)}
    if kind == "ivf":
        record["ivf_lists"] = int(searcher.index.nlist)
    else:
        record |= {"hnsw_m": config.hnsw_m, "hnsw_ef_construction": config.hnsw_ef_construction}
    return record
