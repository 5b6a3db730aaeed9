"""mine: exact top-k image neighbours with FAISS, expanded to candidate caption pairs.

Reader: the embed stage's shards. Mapper: `IndexFlatIP` on unit vectors (exact cosine top-k; the GPU index when
FAISS has GPU support and a GPU is present), self-matches removed, symmetric duplicates handled as the
manifest says; then every image pair becomes the Cartesian product of the two images' captions, computed with
numpy per chunk. Writer: image-pair shards, candidate shards of ids, and the captions table (docs/schemas.md).
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch
from tqdm import tqdm

from pipeline.device import resolve_device
from pipeline.errors import UserError
from pipeline.manifest import Manifest
from pipeline.records import StageRun, require_record
from pipeline.shards import list_shards, read_shards, read_table, shard_name, write_table

log = logging.getLogger(__name__)
STAGE = "mine"
UPSTREAM = "embed"


def pair_ids(caption_id_1: np.ndarray, caption_id_2: np.ndarray) -> np.ndarray:
    """Stable pair id: the two 32-bit caption ids packed into one int64."""
    return (caption_id_1.astype(np.int64) << 32) | caption_id_2.astype(np.int64)


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
        self.base = torch.from_numpy(vectors).to(device)

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
    for lo in tqdm(range(0, n, query_batch), desc=f"mine: knn ({backend})", unit="batch", dynamic_ncols=True):
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


def image_pairs(image_ids: np.ndarray, neighbours: np.ndarray, scores: np.ndarray, mode: str) -> pa.Table:
    """(image_id_1, image_id_2, rank, cosine); `unordered` keeps (i, j) and (j, i) once, as
    image_id_1 < image_id_2 with the better (smaller) of the two ranks."""
    n, k = neighbours.shape
    first = np.repeat(image_ids, k)
    second = image_ids[neighbours.reshape(-1)]
    rank = np.tile(np.arange(1, k + 1, dtype=np.int32), n)
    cosine = scores.reshape(-1)
    if mode == "unordered":
        lo, hi = np.minimum(first, second), np.maximum(first, second)
        order = np.lexsort((rank, hi, lo))  # for each unordered pair, its best rank first
        lo, hi, rank, cosine = lo[order], hi[order], rank[order], cosine[order]
        first_of_pair = np.ones(len(lo), dtype=bool)
        first_of_pair[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
        first, second = lo[first_of_pair], hi[first_of_pair]
        rank, cosine = rank[first_of_pair], cosine[first_of_pair]
    return pa.table(
        {
            "image_id_1": pa.array(first, pa.int64()),
            "image_id_2": pa.array(second, pa.int64()),
            "rank": pa.array(rank, pa.int32()),
            "cosine": pa.array(cosine, pa.float32()),
        }
    )


@dataclass
class CaptionIndex:
    """Captions grouped by image (CSR layout): image row r owns caption_ids[offsets[r]:offsets[r + 1]]."""

    image_ids: np.ndarray
    offsets: np.ndarray
    caption_ids: np.ndarray

    @classmethod
    def build(cls, image_ids: np.ndarray, caption_ids: np.ndarray, caption_image_ids: np.ndarray) -> CaptionIndex:
        """`caption_image_ids` must all be among `image_ids`; every image must have a caption."""
        order = np.lexsort((caption_ids, caption_image_ids))
        by_image = caption_image_ids[order]
        image_ids = np.sort(image_ids)
        starts = np.searchsorted(by_image, image_ids, side="left")
        ends = np.searchsorted(by_image, image_ids, side="right")
        if np.any(ends == starts):
            missing = image_ids[ends == starts][:3].tolist()
            raise UserError(f"embedded images without captions, e.g. image_id {missing}")
        offsets = np.append(starts, len(by_image)).astype(np.int64)
        return cls(image_ids=image_ids, offsets=offsets, caption_ids=caption_ids[order])

    def rows(self, image_ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.image_ids, image_ids)


def expand(pairs: pa.Table, captions: CaptionIndex) -> pa.Table:
    """The Cartesian product of the two images' captions for every image pair, fully vectorised."""
    ids_1 = pairs.column("image_id_1").to_numpy()
    ids_2 = pairs.column("image_id_2").to_numpy()
    rows_1, rows_2 = captions.rows(ids_1), captions.rows(ids_2)
    start_1, count_1 = captions.offsets[rows_1], np.diff(captions.offsets)[rows_1]
    start_2, count_2 = captions.offsets[rows_2], np.diff(captions.offsets)[rows_2]
    sizes = count_1 * count_2
    owner = np.repeat(np.arange(len(sizes)), sizes)
    local = np.arange(owner.size, dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    caption_1 = captions.caption_ids[start_1[owner] + local // count_2[owner]]
    caption_2 = captions.caption_ids[start_2[owner] + local % count_2[owner]]
    return pa.table(
        {
            "pair_id": pa.array(pair_ids(caption_1, caption_2), pa.int64()),
            "caption_id_1": pa.array(caption_1, pa.int64()),
            "caption_id_2": pa.array(caption_2, pa.int64()),
            "image_id_1": pa.array(ids_1[owner], pa.int64()),
            "image_id_2": pa.array(ids_2[owner], pa.int64()),
            "image_cosine": pa.array(pairs.column("cosine").to_numpy()[owner], pa.float32()),
        }
    )


def plan(manifest: Manifest) -> StageRun:
    upstream = require_record(manifest.work_dir / UPSTREAM, UPSTREAM)
    config = manifest.mine
    params = {"k": config.k, "pairs": config.pairs, "candidates_per_shard": config.candidates_per_shard}
    return StageRun(STAGE, manifest.work_dir / STAGE, params, {UPSTREAM: upstream["fingerprint"]})


def run(manifest: Manifest, force: bool = False) -> dict:
    """Mine `<work_dir>/mine/` from `<work_dir>/embed/`."""
    stage = plan(manifest)
    if stage.is_done() and not force:
        log.info("mine: up to date in %s (nothing to do; --force recomputes)", stage.folder)
        return {"status": "up-to-date", "folder": str(stage.folder)}
    resumed = stage.begin(force=force)
    embed_dir = manifest.work_dir / UPSTREAM
    started = time.perf_counter()

    embedded = read_shards(embed_dir, ["image_id", "embedding"])
    image_ids = embedded.column("image_id").to_numpy()
    dim = embedded.schema.field("embedding").type.list_size
    vectors = embedded.column("embedding").combine_chunks().flatten().to_numpy().reshape(-1, dim)
    all_captions = read_table(embed_dir / "captions.parquet")
    embedded_set = np.isin(all_captions.column("image_id").to_numpy(), image_ids)
    captions = all_captions.filter(pa.array(embedded_set))
    write_table(captions, stage.folder / "captions.parquet")
    index = CaptionIndex.build(
        image_ids, captions.column("caption_id").to_numpy(), captions.column("image_id").to_numpy()
    )

    knn_started = time.perf_counter()
    device = resolve_device(manifest.run.device)
    neighbours, scores = exact_knn(vectors, manifest.mine.k, device, manifest.mine.query_batch, manifest.mine.knn)
    knn_seconds = time.perf_counter() - knn_started
    pairs = image_pairs(image_ids, neighbours, scores, manifest.mine.pairs)
    write_table(pairs, stage.folder / "image_pairs" / shard_name(0))

    # Shards are cut at image-pair boundaries so that each holds about candidates_per_shard caption pairs.
    per_pair = (
        np.diff(index.offsets)[index.rows(pairs.column("image_id_1").to_numpy())]
        * np.diff(index.offsets)[index.rows(pairs.column("image_id_2").to_numpy())]
    )
    cumulative = np.cumsum(per_pair)
    bounds = np.searchsorted(cumulative, np.arange(0, cumulative[-1], manifest.mine.candidates_per_shard), "right")
    bounds = np.unique(np.concatenate([[0], bounds[1:], [pairs.num_rows]]))
    candidates_dir = stage.folder / "candidates"
    done = {p.name for p in list_shards(candidates_dir)} if resumed else set()
    for shard, (lo, hi) in enumerate(tqdm(list(itertools.pairwise(bounds)), desc="mine: expand", unit="shard")):
        if shard_name(shard) not in done:
            write_table(expand(pairs.slice(lo, hi - lo), index), candidates_dir / shard_name(shard))

    counts = {
        "images": len(image_ids),
        "captions": captions.num_rows,
        "image_pairs": pairs.num_rows,
        "candidate_pairs": int(cumulative[-1]),
        "candidate_shards": len(bounds) - 1,
    }
    return stage.finish(
        counts,
        resumed=resumed,
        knn_seconds=round(knn_seconds, 3),
        knn_backend=manifest.mine.knn,
        device=str(device),
        seconds_total=round(time.perf_counter() - started, 3),
    )
