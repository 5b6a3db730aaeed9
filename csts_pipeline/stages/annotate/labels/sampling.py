"""Seeded, stratified sampling of kept pairs for condition writing (the conditions export).

Pairs are binned by quantiles of image cosine x bag-of-words IoU and the sample is spread evenly over the
non-empty strata, so the crowd sees easy and hard pairs alike, not just the bulk of the distribution."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

_MASK64 = (1 << 64) - 1


def hash64(values: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 of each value mixed with the seed: a seeded random key that depends on the value, not on the
    row's position, so the same pairs are drawn however the input is sharded or ordered."""
    with np.errstate(over="ignore"):
        z = values.astype(np.int64).view(np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15 + 1) & _MASK64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def quantile_bins(values: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Bin index per value over `bins` quantile bins, and the inner edges. A value equal to an edge falls in the
    lower bin, so tied values share a bin and a heavy tie (many pairs with iou 0) gets a bin of its own while the
    other values still spread over the bins above it (some bins stay empty instead)."""
    edges = np.quantile(values, np.linspace(0, 1, bins + 1)[1:-1])
    return np.searchsorted(edges, values, side="left"), edges


def allocate(sizes: np.ndarray, n: int) -> np.ndarray:
    """Split n across strata as evenly as their sizes allow: small strata are taken whole, what they cannot use
    goes to the others (water filling, smallest first; leftover units go to the larger strata)."""
    quota = np.zeros(len(sizes), np.int64)
    open_strata = [s for s in np.argsort(sizes, kind="stable") if sizes[s] > 0]
    remaining = min(n, int(sizes.sum()))
    for position, stratum in enumerate(open_strata):
        quota[stratum] = min(int(sizes[stratum]), remaining // (len(open_strata) - position))
        remaining -= quota[stratum]
    return quota


@dataclass
class Sample:
    """A stratified sample and how it was drawn (the stage record lists strata and bin edges)."""

    rows: np.ndarray  # sampled row indices, in the seeded random task order
    strata: np.ndarray  # stratum of every input row: cosine_bin * bins + iou_bin
    sizes: np.ndarray  # rows per stratum
    quota: np.ndarray  # sampled rows per stratum
    cosine_edges: np.ndarray
    iou_edges: np.ndarray


def stratified_sample(
    pair_ids: np.ndarray, cosine: np.ndarray, iou: np.ndarray, *, n: int, seed: int, bins: int
) -> Sample:
    """A seeded sample of n rows stratified over quantile bins of image cosine x iou, allocated evenly across the
    non-empty strata; within a stratum the rows with the smallest seeded keys are taken."""
    cosine_bin, cosine_edges = quantile_bins(cosine, bins)
    iou_bin, iou_edges = quantile_bins(iou, bins)
    strata = cosine_bin * bins + iou_bin
    sizes = np.bincount(strata, minlength=bins * bins)
    quota = allocate(sizes, n)
    key = hash64(pair_ids, seed)
    by_stratum = np.argsort(strata, kind="stable")
    parts = []
    for rows, take in zip(np.split(by_stratum, np.cumsum(sizes)[:-1]), quota):
        if 0 < take < len(rows):
            rows = rows[np.argpartition(key[rows], take - 1)[:take]]
        parts.append(rows[:take])
    chosen = np.concatenate(parts)
    rows = chosen[np.argsort(key[chosen], kind="stable")]
    return Sample(rows=rows, strata=strata, sizes=sizes, quota=quota, cosine_edges=cosine_edges, iou_edges=iou_edges)


def unique_pairs(table: pa.Table) -> np.ndarray:
    """Rows to sample from: the first row of each pair id, and one of (a, b) / (b, a) when both were kept."""
    caption_1 = table.column("caption_id_1").to_numpy()
    caption_2 = table.column("caption_id_2").to_numpy()
    unordered = (np.minimum(caption_1, caption_2).astype(np.int64) << 32) | np.maximum(caption_1, caption_2)
    _, first = np.unique(unordered, return_index=True)
    return np.sort(first)


def strata_summary(sample: Sample, bins: int) -> dict[str, dict[str, int]]:
    """Size and sample count of every non-empty stratum, keyed by its two bins, for the stage record."""
    return {
        f"cosine_bin={s // bins},iou_bin={s % bins}": {
            "available": int(sample.sizes[s]),
            "sampled": int(sample.quota[s]),
        }
        for s in np.flatnonzero(sample.sizes)
    }
