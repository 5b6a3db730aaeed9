"""The base split across Ray workers: no process holds the whole index.

Under the Ray executor with `mine.parts` > 1, the driver trains the index once on a sample (stages.mine.ann
`new_index`), and `mine.parts` Ray actors each receive the trained, empty index and fill it from their own range
of embedding shards (read from the shared work folder), with their own re-ranking vector file when the index is
compressed. Every query block goes to every part; each returns its top-k with global row ids and the driver
merges them by score. With the same trained coarse quantiser and nprobe, every part probes the same lists as one
whole index would, so the merged top-k of an IVF-Flat or exact index is the single-process top-k.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from csts_pipeline.pipeline.manifest import MineConfig
from csts_pipeline.stages.mine.budget import IndexPlan
from csts_pipeline.stages.mine.vectors import EmbeddingShards


class PartWorker:
    """One part of the base (a Ray actor): rows [offset, offset + its shards' rows) in its own index."""

    def __init__(self, trained: np.ndarray, plan: IndexPlan, paths: list[str], offset: int, folder: str | None):
        import faiss

        from csts_pipeline.stages.mine.ann import fill
        from csts_pipeline.stages.mine.vectors import EmbeddingShards

        faiss.omp_set_num_threads(1)  # one CPU per actor, as asked of Ray
        shards = EmbeddingShards.of([Path(path) for path in paths])
        index = faiss.deserialize_index(trained)
        part_folder = Path(folder) / f"part-{offset}" if folder else None
        self.searcher = fill(
            index,
            plan,
            parts=shards.shards(shards.dtype),
            n=len(shards),
            dtype=shards.dtype,
            device=None,
            folder=part_folder,
        )
        self.offset, self.kind = offset, plan.kind

    def set_parameter(self, name: str, value: int) -> None:
        import faiss

        faiss.ParameterSpace().set_index_parameter(self.searcher.index, name, value)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, found = self.searcher.search(queries, k)
        return scores, np.where(found >= 0, found + self.offset, -1)


class SplitSearch:
    """The searcher over the parts: `search` merges their top-k; `index` is the trained empty index (its lists)."""

    def __init__(self, ray: Any, actors: list[Any], index: Any):
        self.ray, self.actors, self.index = ray, actors, index

    def set_parameter(self, name: str, value: int) -> None:
        self.ray.get([actor.set_parameter.remote(name, value) for actor in self.actors])

    def close(self) -> None:
        """The actors' memory back to the cluster."""
        for actor in self.actors:
            self.ray.kill(actor)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries_ref = self.ray.put(np.ascontiguousarray(queries, np.float32))
        parts = self.ray.get([actor.search.remote(queries_ref, k) for actor in self.actors])
        return merge_top_k([scores for scores, _ in parts], [ids for _, ids in parts], k)


def merge_top_k(scores: list[np.ndarray], ids: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (by score, then by lower id) of several parts' top-k lists, best first."""
    all_scores, all_ids = np.concatenate(scores, axis=1), np.concatenate(ids, axis=1)
    all_scores = np.where(all_ids >= 0, all_scores, -np.inf)
    order = np.lexsort((np.where(all_ids >= 0, all_ids, np.iinfo(np.int64).max), -all_scores), axis=1)[:, :k]
    return np.take_along_axis(all_scores, order, 1), np.take_along_axis(all_ids, order, 1)


def part_ranges(shards: EmbeddingShards, parts: int) -> list[tuple[list[Path], int]]:
    """(shard paths, first row) of `parts` contiguous groups of shards of about equal rows."""
    sizes = np.asarray(shards.shard_rows)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    cuts = np.searchsorted(np.cumsum(sizes), np.linspace(0, sizes.sum(), parts + 1)[1:-1], side="left") + 1
    groups = np.split(np.arange(len(sizes)), cuts)
    return [([shards.paths[i] for i in group], int(starts[group[0]])) for group in groups if len(group)]


def split_searcher(
    plan: IndexPlan, shards: EmbeddingShards, config: MineConfig, tasks: Any, folder: Path
) -> tuple[SplitSearch, dict[str, Any]]:
    """(searcher, record): the index trained here, filled and searched in `mine.parts` Ray actors."""
    import faiss

    from csts_pipeline.stages.mine.ann import new_index, tune

    started = time.perf_counter()
    tasks.executor.connect()
    ray = tasks.executor.ray
    index = new_index(plan, shards, config)
    trained = ray.put(faiss.serialize_index(index))
    worker = ray.remote(num_cpus=1)(PartWorker)
    ranges = part_ranges(shards, config.parts)
    actors = [worker.remote(trained, plan, [str(p) for p in paths], lo, str(folder)) for paths, lo in ranges]
    searcher = SplitSearch(ray, actors, index)
    record = {"build_seconds": round(time.perf_counter() - started, 3), "parts": len(actors)}
    if plan.kind == "exact":
        return searcher, record | {
            "index": "exact",
            "knn_backend": "faiss",
            "budget": plan.record(config.memory_budget),
        }
    record |= tune(searcher, plan.kind, shards, config)
    return searcher, record | {"budget": plan.record(config.memory_budget)}
