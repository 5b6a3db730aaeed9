"""mine's whole-stage work in bounded memory: build the searcher, measure its recall, search every query block
into neighbour lists on disk, then turn each block into an image-pairs shard and its candidate units.

Memory beyond the index: one query block of vectors and results, one embedding shard, the image and caption ids
(O(N) integers); the neighbour lists (N x k ids and cosines) live in memory maps in the staging folder, read back
block by block when the pairs are made.
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from csts_pipeline.pipeline.commit import UNITS
from csts_pipeline.pipeline.failpoints import failpoint
from csts_pipeline.pipeline.manifest import MineConfig
from csts_pipeline.pipeline.records import read_json, write_json
from csts_pipeline.pipeline.schemas import CANDIDATES, IMAGE_PAIRS
from csts_pipeline.pipeline.shards import shard_name, write_table
from csts_pipeline.pipeline.stage import Resources, Unit
from csts_pipeline.stages.mine.budget import IndexPlan, plan_index
from csts_pipeline.stages.mine.pairs import CaptionIndex, block_pairs, candidate_shard_bounds
from csts_pipeline.stages.mine.vectors import EmbeddingShards, release_pages, row_runs

KNN_DIR = "_knn"  # hidden from the output listing; removed once the pairs are written
BLOCKS_DONE = "blocks.done"  # a line per finished query block: its key (first row or place) and its seconds
BLOCKS_BATCH = "blocks.batch"  # the mine.query_batch those blocks were cut with: other keys name other rows
PREPARED = "prepared.json"  # in the run state (`_units/`): every image-pairs shard is written, and their units


def build_searcher(
    plan: IndexPlan | str, shards: EmbeddingShards, config: MineConfig, device: torch.device, folder: Path | None = None
):
    """(searcher, record fields): the exact searcher, or an approximate index tuned to the recall target; a
    compressed index keeps its full vectors for re-ranking in `folder` (the staging `_knn`)."""
    started = time.perf_counter()
    if isinstance(plan, str):
        plan = plan_index(config.model_copy(update={"index": plan}), len(shards), shards.dim)
    kind = plan.kind
    if kind == "exact":
        from csts_pipeline.stages.mine.knn import exact_searcher

        searcher = exact_searcher(shards.dim, device, config.knn, shards.dtype)
        for vectors in shards.shards(shards.dtype if config.knn == "torch" else np.float32):  # torch casts itself
            searcher.add(vectors)
        record = {"index": "exact", "knn_backend": config.knn, "build_seconds": _since(started)}
        return searcher, record | {"budget": plan.record(config.memory_budget)}
    from csts_pipeline.stages.mine.ann import build_index, tune

    if plan.backend == "torch":
        from csts_pipeline.stages.mine.torch_ivf import build_torch_ivf

        searcher = build_torch_ivf(plan, shards, config, device)
    else:
        searcher = build_index(plan, shards, config, device, folder)
    built = _since(started)
    record = {"build_seconds": built, "ivf_backend": plan.backend} if kind == "ivf" else {"build_seconds": built}
    record |= tune(searcher, kind, shards, config)
    return searcher, record | {"budget": plan.record(config.memory_budget)}


def search_block(searcher, queries: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (self excluded) of the query block of rows `rows`: the one search step, run in a loop by the local
    executor and as one Ray task per block by the Ray executor."""
    from csts_pipeline.stages.mine.knn import drop_self

    found_scores, found = searcher.search(queries, k + 1)
    return drop_self(found, found_scores, rows, k)


def local_blocks(
    searcher, shards: EmbeddingShards, k: int, batch: int, skip: frozenset[int] = frozenset()
) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """(key, rows, neighbours, scores) per query block of consecutive rows, keyed by its first row; memory holds
    one block of queries. Blocks whose key is in `skip` (finished by an interrupted run) are not searched again."""
    for lo, queries in shards.blocks(batch):
        if lo not in skip:
            rows = np.arange(lo, lo + len(queries))
            yield lo, rows, *search_block(searcher, queries, rows, k)


def listed_blocks(
    searcher, k: int, batch: int, skip: frozenset[int] = frozenset()
) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """(key, rows, neighbours, scores) per query block of a compressed index or a torch IVF, its rows taken list
    by list (`ann.rows_by_list`, `TorchIVF.rows_by_list`) and read from the re-ranking copy (or the device's
    base); keyed by the block's place in that order. Rows of one list probe nearly the same lists and share most
    of their candidates, so the scan and the re-ranking's reads cost less than for rows taken in order
    (bench/mine/query_order.py), and a torch IVF scores a whole list's queries in one product."""
    from csts_pipeline.stages.mine.ann import rows_by_list
    from csts_pipeline.stages.mine.rerank import RerankSearch, StoredRows

    if isinstance(searcher, RerankSearch):
        order, reader = rows_by_list(searcher.index), StoredRows(searcher.vectors)
    else:
        order, reader = searcher.rows_by_list(), searcher.stored_rows()
    with reader as stored:
        for key in range(0, len(order), batch):
            if key not in skip:
                rows = np.sort(order[key : key + batch])
                queries = np.asarray(stored.read(rows), np.float32)
                yield key, rows, *search_block(searcher, queries, rows, k)


def exact_task(shared: tuple[np.ndarray, int, str, int], block: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """One query block as a task: the exact searcher over the shared base vectors (read from the object store
    without a copy; the index holds its own) on the driver's thread count, then `search_block`. On the CPU: the
    stage asks for no GPU."""
    from csts_pipeline.stages.mine.knn import exact_searcher, set_search_threads

    base, k, backend, threads = shared
    lo, hi = block
    set_search_threads(backend, threads)
    searcher = exact_searcher(base.shape[1], torch.device("cpu"), backend)
    searcher.add(base)
    return search_block(searcher, base[lo:hi], np.arange(lo, hi), k)


def task_blocks(tasks, shards: EmbeddingShards, config: MineConfig) -> Iterator[tuple[int, ...]]:
    """(key, rows, neighbours, scores) per query block, each block a task of `tasks` (pipeline.stage), which
    share the base vectors: the same blocks, searcher and thread count as `local_blocks` on this machine, so the
    same bits; each task asks for as many CPUs as it runs threads."""
    from csts_pipeline.stages.mine.knn import search_threads

    n, batch, threads = len(shards), config.query_batch, search_threads(config.knn)
    bounds = [(lo, min(n, lo + batch)) for lo in range(0, n, batch)]
    shared = (shards.all(), config.k, config.knn, threads)
    found = tasks.map(exact_task, bounds, shared, Resources(cpus=threads))
    for (lo, hi), (ids, cosines) in zip(bounds, found):
        yield lo, np.arange(lo, hi), ids, cosines


def finished_blocks(folder: Path, batch: int) -> frozenset[int]:
    """Keys of the query blocks an interrupted run finished (their lists are in `folder`'s files); none when it
    cut its blocks with another `batch`, whose keys would name other rows."""
    batch_file = folder / BLOCKS_BATCH
    if not batch_file.is_file() or batch_file.read_text().strip() != str(batch):
        return frozenset()
    return frozenset(_done_lines(folder))


def search_seconds(folder: Path) -> float:
    """The seconds every finished block took, over all the runs that searched them (a resumed run included)."""
    return round(sum(_done_lines(folder).values()), 3)


def _done_lines(folder: Path) -> dict[int, float]:
    done = folder / BLOCKS_DONE
    if not (done.is_file() and (folder / "neighbours.npy").is_file() and (folder / "scores.npy").is_file()):
        return {}
    lines = [line.split() for line in done.read_text().splitlines() if line.strip()]
    return {int(words[0]): float(words[1]) for words in lines if len(words) == 2}


def store_knn(
    blocks: Iterable[tuple[int, np.ndarray, np.ndarray, np.ndarray]], n: int, k: int, batch: int, folder: Path
):
    """The blocks' top-k lists, in .npy files under `folder` (they need not fit in memory), returned as read-only
    memory maps: (neighbours, scores). Blocks are written by plain file writes, not through a map, whose pages
    would count as the process's memory (5 GB at 10M images). After each block its key is appended to
    `blocks.done`, so a run killed mid-search resumes from its finished blocks (`finished_blocks`), when it cuts
    them with the same `batch`."""
    folder.mkdir(parents=True, exist_ok=True)
    fresh = not finished_blocks(folder, batch)
    if fresh:
        (folder / BLOCKS_DONE).unlink(missing_ok=True)
        (folder / BLOCKS_BATCH).write_text(f"{batch}\n")
    files = [
        _RowFile(folder / "neighbours.npy", np.int32, (n, k), fresh),
        _RowFile(folder / "scores.npy", np.float32, (n, k), fresh),
    ]
    with open(folder / BLOCKS_DONE, "a") as done:
        started = time.perf_counter()
        for key, rows, ids, cosines in blocks:  # the block is searched while this loop waits for it
            files[0].write(rows, ids)
            files[1].write(rows, cosines)
            done.write(f"{key} {time.perf_counter() - started:.3f}\n")
            started = time.perf_counter()
            done.flush()
            failpoint(f"mine:knn-block:{key}")
    for file in files:
        file.close()
    return np.load(folder / "neighbours.npy", mmap_mode="r"), np.load(folder / "scores.npy", mmap_mode="r")


class _RowFile:
    """An .npy file of `shape` whose rows are written in place by offset (created empty unless resuming)."""

    def __init__(self, path: Path, dtype: type, shape: tuple[int, int], fresh: bool):
        if fresh or not path.is_file():
            header = np.lib.format.open_memmap(path, "w+", dtype, shape)
            del header
        self.offset = np.load(path, mmap_mode="r").offset
        self.dtype, self.row_bytes = np.dtype(dtype), shape[1] * np.dtype(dtype).itemsize
        self.handle = open(path, "r+b")  # noqa: SIM115 (closed by `close`)

    def write(self, rows: np.ndarray, values: np.ndarray) -> None:
        """`values` into the rows numbered `rows` (sorted): one write per run of consecutive rows."""
        data = memoryview(np.ascontiguousarray(values, self.dtype)).cast("B")
        for start, end, row in row_runs(rows):
            os.pwrite(
                self.handle.fileno(),
                data[start * self.row_bytes : end * self.row_bytes],
                self.offset + row * self.row_bytes,
            )

    def close(self) -> None:
        self.handle.close()


def saved_searcher(folder: Path, build: Callable[[], tuple[Any, dict[str, Any]]]) -> tuple[Any, dict[str, Any]]:
    """(searcher, record) kept in `folder` by an interrupted run, else `build()`'s, saved there when it is a
    FAISS index on the CPU (an approximate index at 10M images takes most of an hour to build and tune here)."""
    from csts_pipeline.stages.mine.knn import FaissSearch
    from csts_pipeline.stages.mine.rerank import RerankSearch

    index_file, record_file = folder / "index.faiss", folder / "searcher.json"
    if index_file.is_file() and record_file.is_file():
        import faiss

        from csts_pipeline.stages.mine.ann import set_tuned

        saved = read_json(record_file)
        index = faiss.read_index(str(index_file))
        set_tuned(index, saved["record"])  # FAISS saves nprobe and efSearch too: the record is the one to trust
        if saved["rerank_candidates"]:
            return RerankSearch(index, folder / "vectors.npy", saved["rerank_candidates"]), saved["record"]
        return FaissSearch(index), saved["record"]
    searcher, record = build()
    index = getattr(searcher, "index", None)
    cpu = isinstance(searcher, (FaissSearch, RerankSearch)) and "Gpu" not in type(index).__name__
    if record.get("index") != "exact" and cpu:
        import faiss

        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(index, str(folder / "index.tmp"))
        os.replace(folder / "index.tmp", index_file)
        candidates = searcher.candidates if isinstance(searcher, RerankSearch) else 0
        write_json(record_file, {"record": record, "rerank_candidates": candidates})
    return searcher, record


def search_all(
    searcher, shards: EmbeddingShards, *, k: int, batch: int, folder: Path, skip: frozenset[int] = frozenset()
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (self excluded) of every row, query block by query block, into memory maps under `folder`: a
    compressed index's and a torch IVF's blocks list by list (`listed_blocks`), any other's in row order. Blocks
    keyed in `skip` (`finished_blocks` of an interrupted run) are not searched again."""
    from csts_pipeline.stages.mine.rerank import RerankSearch

    if isinstance(searcher, RerankSearch) or hasattr(searcher, "rows_by_list"):
        blocks = listed_blocks(searcher, k, batch, skip)
    else:
        blocks = local_blocks(searcher, shards, k, batch, skip)
    return store_knn(blocks, len(shards), k, batch, folder)


def write_pairs(
    neighbours: np.ndarray,
    scores: np.ndarray,
    *,
    image_ids: np.ndarray,
    captions: CaptionIndex,
    config: MineConfig,
    staging: Path,
) -> tuple[list[Unit], int]:
    """One image-pairs shard per query block, and the candidate units cut from it (about
    `candidates_per_shard` caption pairs each, at image-pairs boundaries). Returns (units, image pairs). Shards an
    interrupted run left are replaced: all of them, so none cut with another `query_batch` stays behind. The lists
    may be memory maps (`store_knn`): their pages are given back after each block."""
    shutil.rmtree(staging / IMAGE_PAIRS, ignore_errors=True)
    units: list[Unit] = []
    total = 0
    for block, lo in enumerate(range(0, len(image_ids), config.query_batch)):
        hi = min(len(image_ids), lo + config.query_batch)
        pairs = block_pairs(
            lo,
            neighbours[lo:hi],
            scores=scores[lo:hi],
            all_neighbours=neighbours,
            all_scores=scores,
            image_ids=image_ids,
            mode=config.pairs,
        )
        write_table(pairs, staging / IMAGE_PAIRS / shard_name(block))
        release_pages(neighbours)  # memory holds one block's pages of the lists, not all of them
        release_pages(scores)
        total += pairs.num_rows
        bounds, _ = candidate_shard_bounds(pairs, captions, config.candidates_per_shard)
        for start, stop in itertools.pairwise(bounds):
            key = f"{CANDIDATES}/{shard_name(len(units))}"
            units.append(Unit(key, {"pairs": block, "lo": int(start), "hi": int(stop)}, size=int(stop - start)))
    return units, total


@dataclass
class Prepared:
    """What mine's prepare hands its units: the candidate units over the image-pairs shards, how many image
    pairs there are, and the search's record and seconds."""

    units: list[Unit]
    image_pairs: int
    search: dict[str, Any]
    knn_seconds: float


def save_prepared(staging: Path, prepared: Prepared) -> None:
    """Every image-pairs shard is written: a run killed while expanding candidates resumes from them and
    `load_prepared`, not with a new search (the neighbour lists are gone by then; at 10M images the search
    takes hours). Kept with the executor's markers, which the commit drops."""
    units = [[unit.key, unit.payload, unit.size] for unit in prepared.units]
    saved = {"units": units, "image_pairs": prepared.image_pairs, "search": prepared.search}
    write_json(staging / UNITS / PREPARED, saved | {"knn_seconds": prepared.knn_seconds})


def load_prepared(staging: Path) -> Prepared | None:
    """What `save_prepared` kept in `staging`, when every image-pairs shard its units read is still there."""
    path = staging / UNITS / PREPARED
    if not path.is_file():
        return None
    saved = read_json(path)
    units = [Unit(key, payload, size) for key, payload, size in saved["units"]]
    if any(not (staging / IMAGE_PAIRS / shard_name(unit.payload["pairs"])).is_file() for unit in units):
        return None
    return Prepared(units, saved["image_pairs"], saved["search"], saved["knn_seconds"])


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 3)
