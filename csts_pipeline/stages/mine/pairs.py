"""Image pairs from neighbour lists, and their expansion into caption pairs (vectorised numpy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.schemas import CANDIDATES_SCHEMA, IMAGE_PAIRS_SCHEMA
from csts_pipeline.stages.mine.vectors import release_pages


def pair_ids(caption_id_1: np.ndarray, caption_id_2: np.ndarray) -> np.ndarray:
    """Stable pair id: the two 32-bit caption ids packed into one int64."""
    return (caption_id_1.astype(np.int64) << 32) | caption_id_2.astype(np.int64)


def image_pairs(image_ids: np.ndarray, neighbours: np.ndarray, scores: np.ndarray, mode: str) -> pa.Table:
    """(image_id_1, image_id_2, rank, cosine) of every neighbour list at once; see `block_pairs`."""
    return block_pairs(
        0, neighbours, scores=scores, all_neighbours=neighbours, all_scores=scores, image_ids=image_ids, mode=mode
    )


def block_pairs(
    lo: int,
    neighbours: np.ndarray,
    *,
    scores: np.ndarray,
    all_neighbours: np.ndarray,
    all_scores: np.ndarray,
    image_ids: np.ndarray,
    mode: str,
) -> pa.Table:
    """Image pairs of the query rows [lo, lo + len(neighbours)), without a global sort.

    `ordered` keeps every (query, neighbour). `unordered` emits each unordered pair once: from the smaller row when
    both lists hold it, with the better of the two ranks (and that direction's cosine; the smaller row's on a
    tie), else from whichever list holds it; image_id_1 < image_id_2. `all_neighbours` may be a memory map.
    Missing neighbours (-1, from an approximate index) are skipped."""
    m, k = neighbours.shape
    query = np.repeat(np.arange(lo, lo + m, dtype=np.int64), k)
    other = neighbours.reshape(-1).astype(np.int64)
    rank = np.tile(np.arange(1, k + 1, dtype=np.int32), m)
    cosine = scores.reshape(-1).astype(np.float32)
    valid = other >= 0
    query, other, rank, cosine = query[valid], other[valid], rank[valid], cosine[valid]
    first, second = image_ids[query], image_ids[other]
    if mode == "unordered":
        back = reverse_rank(query, other, all_neighbours)
        keep = (query < other) | (back == 0)
        query, other, rank, cosine, back = query[keep], other[keep], rank[keep], cosine[keep], back[keep]
        better = (back > 0) & (back < rank)
        if better.any():
            cosine[better] = np.asarray(all_scores[other[better], back[better] - 1], np.float32)
            release_pages(all_scores)
            rank[better] = back[better]
        first, second = image_ids[query], image_ids[other]
        first, second = np.minimum(first, second), np.maximum(first, second)
    return pa.table(
        {
            "image_id_1": pa.array(first, pa.int64()),
            "image_id_2": pa.array(second, pa.int64()),
            "rank": pa.array(rank, pa.int32()),
            "cosine": pa.array(cosine, pa.float32()),
        },
        schema=IMAGE_PAIRS_SCHEMA,
    )


def reverse_rank(query: np.ndarray, other: np.ndarray, all_neighbours: np.ndarray, chunk: int = 65_536) -> np.ndarray:
    """For each (query, other): the 1-based rank of `query` in `other`'s neighbour list, 0 when absent. Gathers
    `chunk` lists at a time, so memory stays at chunk * k ids; a memory map's pages are given back after each
    chunk (a block's look-ups land on nearly every page of the lists: 2.56 GB at 10M images)."""
    back = np.zeros(len(query), np.int32)
    for lo in range(0, len(query), chunk):
        lists = np.asarray(all_neighbours[other[lo : lo + chunk]])
        release_pages(all_neighbours)
        hit = lists == query[lo : lo + chunk, None]
        back[lo : lo + chunk] = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)
    return back


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
        },
        schema=CANDIDATES_SCHEMA,
    )


def candidate_shard_bounds(pairs: pa.Table, captions: CaptionIndex, per_shard: int) -> tuple[np.ndarray, int]:
    """Image-pair row bounds of candidate shards of about `per_shard` caption pairs each, cut at image-pair
    boundaries; and the total number of caption pairs."""
    per_pair = (
        np.diff(captions.offsets)[captions.rows(pairs.column("image_id_1").to_numpy())]
        * np.diff(captions.offsets)[captions.rows(pairs.column("image_id_2").to_numpy())]
    )
    cumulative = np.cumsum(per_pair)
    total = int(cumulative[-1]) if len(cumulative) else 0
    bounds = np.searchsorted(cumulative, np.arange(0, total, per_shard), "right")
    bounds = np.unique(np.concatenate([[0], bounds[1:], [pairs.num_rows]])).astype(np.int64)
    return bounds, total
