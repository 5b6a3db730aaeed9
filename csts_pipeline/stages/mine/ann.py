"""Approximate neighbours with measured recall: FAISS IVF-Flat and HNSW, tuned on a seeded query sample.

Every approximate run draws `mine.recall_sample` query rows, computes their exact top-k by streaming over the
embedding shards (one block in memory), and raises nprobe (IVF) or efSearch (HNSW) by doubling until the
approximate top-k overlaps the exact one by `mine.recall_target` on average. The chosen parameter, the recall
reached and every step tried go into mine's `_stage.json` (`search`), so a reader can see what the pairs cost in
recall. Choosing `auto`: docs/mine.md (exact below `mine.exact_below` images, measured there).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from csts_pipeline.pipeline.manifest import MineConfig
from csts_pipeline.stages.mine.budget import COMPRESSED, QUANTIZER_EF_SEARCH, IndexPlan, plan_index, training_rows
from csts_pipeline.stages.mine.rerank import RerankSearch, VectorFile
from csts_pipeline.stages.mine.vectors import EmbeddingShards

if TYPE_CHECKING:  # torch only when an index is built: plan() (and `status`) resolve the index without it
    import torch

    from csts_pipeline.stages.mine.knn import FaissSearch

MAX_EF_SEARCH = 4096
STALLED_AFTER = 2  # doublings in a row whose projected recall falls short of the target
log = logging.getLogger(__name__)


def resolve_index(config: MineConfig, n_images: int, dim: int = 512) -> str:
    """exact, ivf, ivf_sq8, ivf_pq or hnsw; `auto` is exact below `exact_below` images, where exact search is
    quicker than building and tuning an index, and above it the most accurate IVF index that fits
    `mine.memory_budget` (stages.mine.budget)."""
    return plan_index(config, n_images, dim).kind


def new_index(plan: IndexPlan, shards: EmbeddingShards, config: MineConfig):
    """The empty FAISS index of the plan: IVF trained on a seeded sample (up to 64 points per list, more for PQ
    codebooks; an HNSW coarse quantiser for many lists), HNSW, or exact (flat)."""
    import faiss

    dim = shards.dim
    if plan.kind == "exact":
        return faiss.IndexFlatIP(dim)
    if plan.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = config.hnsw_ef_construction
        return index
    index = faiss.index_factory(dim, plan.factory, faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.extract_index_ivf(index)
    ivf.cp.niter = 10
    ivf.cp.seed = config.seed
    if plan.quantizer == "hnsw":  # efSearch also bounds the k-means assignment's accuracy while training
        faiss.downcast_index(ivf.quantizer).hnsw.efSearch = QUANTIZER_EF_SEARCH
    rng = np.random.default_rng(config.seed)
    sample = np.sort(rng.choice(len(shards), training_rows(plan.kind, len(shards), plan.lists), replace=False))
    index.train(shards.rows(sample))
    return index


def fill(index, plan: IndexPlan, *, parts, n: int, dtype, device, folder: Path | None) -> FaissSearch | RerankSearch:
    """`index` filled from `parts` (an iterator of vector blocks, streamed: one in memory); a compressed index
    also copies the full vectors into `folder`/vectors.npy as it is filled, and re-ranks its candidates from
    there."""
    from csts_pipeline.stages.mine.knn import FaissSearch

    on_gpu = plan.kind == "ivf" and plan.quantizer == "flat"  # CPU: no GPU HNSW quantiser or re-ranking
    searcher = FaissSearch(index, device if on_gpu else None)
    compressed = plan.kind in COMPRESSED and folder is not None
    copy = VectorFile(folder / "vectors.npy", n, index.d, dtype) if compressed else None
    for vectors in parts:
        searcher.add(np.ascontiguousarray(vectors, np.float32))
        if copy is not None:
            copy.add(vectors)
    if copy is None:
        return searcher
    copy.close()
    return RerankSearch(searcher.index, copy.path, plan.candidates)


def build_index(
    plan: IndexPlan, shards: EmbeddingShards, config: MineConfig, device: torch.device, folder: Path | None = None
) -> FaissSearch | RerankSearch:
    """The plan's index trained on a sample and filled shard by shard, never the whole base in one array."""
    index = new_index(plan, shards, config)
    return fill(
        index, plan, parts=shards.shards(shards.dtype), n=len(shards), dtype=shards.dtype, device=device, folder=folder
    )


def exact_top_k(
    shards: EmbeddingShards, rows: np.ndarray | None, k: int, block: int = 16_384, queries: np.ndarray | None = None
) -> np.ndarray:
    """Exact top-k rows of the sample queries `rows` (self excluded), or of `queries` that are not rows of the
    base (nothing excluded), streaming over the shards: one block of the base in memory."""
    if queries is None:
        queries = shards.rows(rows)
    else:
        queries, rows = np.asarray(queries, np.float32), np.full(len(queries), -1)
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


def holdout_recall(searcher, shards: EmbeddingShards, queries: np.ndarray, k: int) -> float:
    """recall@k of `searcher` at its current parameter on queries the index did not see (drawn from the same
    distribution, never added), against their exact top-k over the base computed block by block."""
    truth = exact_top_k(shards, None, k, queries=queries)
    _, found = searcher.search(np.ascontiguousarray(queries, np.float32), k)
    return recall_at_k(found, truth)


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean share of each query's exact top-k that the approximate top-k holds."""
    k = truth.shape[1]
    hits = (found[:, :, None] == truth[:, None, :]).any(axis=1) & (truth >= 0)
    return float(hits.sum(axis=1).mean() / k)


def _set_parameter(searcher: FaissSearch, kind: str, value: int) -> None:
    name = "efSearch" if kind == "hnsw" else "nprobe"
    if hasattr(searcher, "set_parameter"):  # an index split across workers (stages.mine.base_split), a torch IVF
        searcher.set_parameter(name, value)
        return
    import faiss

    space = faiss.GpuParameterSpace() if "Gpu" in type(searcher.index).__name__ else faiss.ParameterSpace()
    space.set_index_parameter(searcher.index, name, value)


def set_tuned(index, record: dict[str, Any]) -> None:
    """Set a FAISS index (on the CPU) to the nprobe or efSearch its tuning record chose."""
    import faiss

    name = "efSearch" if record["index"] == "hnsw" else "nprobe"
    faiss.ParameterSpace().set_index_parameter(index, name, record[name])


def rows_by_list(index) -> np.ndarray:
    """Every row of an IVF index once, grouped by its inverted list (lists in their order, rows in the order they
    were added): the same index gives the same order, so an interrupted search resumes on the same blocks."""
    import faiss

    ivf = faiss.extract_index_ivf(index)
    lists = ivf.invlists
    sizes = [lists.list_size(number) for number in range(ivf.nlist)]
    parts = [faiss.rev_swig_ptr(lists.get_ids(number), size).copy() for number, size in enumerate(sizes) if size]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def nlist(index) -> int:
    """Inverted lists of an IVF index, also inside OPQ's pre-transform (or on the GPU), or of a torch IVF."""
    if hasattr(index, "nlist"):
        return int(index.nlist)
    import faiss

    return int(faiss.extract_index_ivf(index).nlist)


def climb(measure: Callable[[int], float], value: int, ceiling: int, target: float) -> tuple[int, float, bool]:
    """(value, recall, stalled): double `value` until `measure(value)` reaches `target`, then try 3/4 of that value
    once (doubling overshoots by up to 2x, and search time grows with the value). Stop early when recall stalls:
    once a doubling gained less than the one before (by the ratio r), the gains left add up to about
    gain x r / (1 - r); when two doublings in a row project short of the target, more doublings, each twice the
    search time, would not reach it (a compressed index's candidates, not its probes, then bound recall)."""
    recall, before, gain, short = measure(value), None, None, 0
    while recall < target and value < ceiling:
        before, last = value, recall
        value = min(ceiling, value * 2)
        recall = measure(value)
        previous_gain, gain = gain, recall - last
        if recall < target and previous_gain and 0 <= gain < previous_gain:
            ratio = gain / previous_gain
            short = short + 1 if recall + gain * ratio / (1 - ratio) < target else 0
            if short == STALLED_AFTER:
                return value, recall, True
        else:
            short = 0
    between = value * 3 // 4
    if recall >= target and before is not None and between > before and (lower := measure(between)) >= target:
        return between, lower, False
    return value, recall, False


def tune(searcher: FaissSearch, kind: str, shards: EmbeddingShards, config: MineConfig) -> dict[str, Any]:
    """nprobe / efSearch raised (`climb`) until recall@k on the seeded sample reaches the target, the parameter its
    ceiling, or recall stalls; the searcher is left at the chosen value. Returns what goes into the stage record."""
    from csts_pipeline.stages.mine.knn import drop_self

    started = time.perf_counter()
    k = config.k
    rng = np.random.default_rng(config.seed + 1)
    rows = np.sort(rng.choice(len(shards), min(len(shards), config.recall_sample), replace=False))
    queries = shards.rows(rows)
    if hasattr(searcher, "exact_search"):  # a base on a device: the exact top-k there, not streamed on the host
        exact_scores, exact_found = searcher.exact_search(queries, k + 1)
        truth = drop_self(exact_found, exact_scores, rows, k)[0]
    else:
        truth = exact_top_k(shards, rows, k)
    name, value = ("efSearch", k + 1) if kind == "hnsw" else ("nprobe", 1)
    ceiling = MAX_EF_SEARCH if kind == "hnsw" else nlist(searcher.index)
    tried = []

    def measure(value: int) -> float:
        _set_parameter(searcher, kind, value)
        scores, found = searcher.search(queries, k + 1)
        recall = recall_at_k(drop_self(found, scores, rows, k)[0], truth)
        tried.append({name: value, "recall": round(recall, 4)})
        return recall

    value, recall, stalled = climb(measure, value, ceiling, config.recall_target)
    _set_parameter(searcher, kind, value)
    record = {"index": kind, name: value, "recall_at_k": round(recall, 4), "recall_target": config.recall_target}
    if stalled:
        record["stalled"] = True
        log.warning(
            "mine: recall@%d stops near %.4f, below the target %g, from %s %d on: the candidates, not the %s, "
            "bound it (raise mine.rerank for a compressed index, or choose a larger memory budget)",
            k,
            recall,
            config.recall_target,
            name,
            value,
            name,
        )
    record |= {"recall_sample": len(rows), "tried": tried, "tune_seconds": round(time.perf_counter() - started, 3)}
    if kind != "hnsw":
        record["ivf_lists"] = nlist(searcher.index)
    else:
        record |= {"hnsw_m": config.hnsw_m, "hnsw_ef_construction": config.hnsw_ef_construction}
    return record
