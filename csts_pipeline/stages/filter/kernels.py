"""The compiled CPU kernels of the filter (numba, parallel over pairs): no per-pair Python anywhere.

Sentence rows index `TextFeatures` (bags of words as sorted unique ids in CSR, word counts, character lengths)
and the embedding matrix. The cosine is accumulated in float64 from float32 embeddings, as the reference does.
"""

from __future__ import annotations

import numba
import numpy as np

PAIRS_PER_BLOCK = 8192  # pairs one thread scores with one bag-of-words stamp array
COSINE_OFF, COSINE_SURVIVORS, COSINE_ALL = 0, 1, 2


@numba.njit(fastmath={"reassoc", "contract"}, cache=True)
def dot(x, y):  # pragma: no cover - compiled
    """float64 dot product; reassociation lets LLVM vectorise it (only the order of the sum changes)."""
    total = 0.0
    for d in range(x.size):
        total += np.float64(x[d]) * np.float64(y[d])
    return total


@numba.njit(parallel=True, cache=True)
def cosine_kernel(first, second, embeddings, out):  # pragma: no cover - compiled
    for p in numba.prange(first.size):
        out[p] = dot(embeddings[first[p]], embeddings[second[p]])


@numba.njit(parallel=True, cache=True)
def fused_kernel(
    first, second, offsets, ids, vocabulary, words, chars, embeddings, low, high, cosine_mode, edges, bins,
    iou, ratio, length, cosine, bits, counts,
):  # pragma: no cover - compiled  # fmt: skip
    """Every metric, decision and histogram count of a pair in one pass, so that the cosine of a pair failing a
    cheap criterion costs nothing and no metric array is read twice. bits[p] has bit c set where CRITERIA[c]
    fails (bounds low[c] <= x <= high[c], +-inf when off); the cosine is NaN where not computed (and not counted).
    counts[block, c, 0 | 1, i]: pairs of the block in bin i of metric c (edges[c, :bins[c] + 1]), all | kept.

    IoU by stamping: the words of sentence a are marked with a in a per-block array (once per run of pairs with
    the same first sentence, as mine writes them), then each word of b is one look-up: about twice as fast as
    merging the two sorted id lists, whose branches the CPU cannot predict."""
    blocks = counts.shape[0]
    for block in numba.prange(blocks):
        stamp = np.full(vocabulary, -1, np.int32)
        marked = -1
        for p in range(block * PAIRS_PER_BLOCK, min(first.size, (block + 1) * PAIRS_PER_BLOCK)):
            a, b = first[p], second[p]
            if a != marked:
                for i in range(offsets[a], offsets[a + 1]):
                    stamp[ids[i]] = a
                marked = a
            common = 0
            for j in range(offsets[b], offsets[b + 1]):
                common += stamp[ids[j]] == a
            union = (offsets[a + 1] - offsets[a]) + (offsets[b + 1] - offsets[b]) - common
            iou_p = common / union if union > 0 else 0.0
            shorter, longer = min(words[a], words[b]), max(words[a], words[b])
            ratio_p = shorter / longer if longer > 0 else 0.0
            length_p = min(chars[a], chars[b])
            failed = 0
            if length_p < low[0] or length_p > high[0]:
                failed |= 1
            if ratio_p < low[1] or ratio_p > high[1]:
                failed |= 2
            if iou_p < low[2] or iou_p > high[2]:
                failed |= 4
            cosine_p = np.nan
            if cosine_mode == COSINE_ALL or (cosine_mode == COSINE_SURVIVORS and failed == 0):
                cosine_p = dot(embeddings[a], embeddings[b])
                if cosine_p < low[3] or cosine_p > high[3]:
                    failed |= 8
            iou[p], ratio[p], length[p], cosine[p], bits[p] = iou_p, ratio_p, length_p, cosine_p, failed
            kept = failed == 0
            count_value(counts[block, 0], np.float64(length_p), edges[0], bins[0], kept)
            count_value(counts[block, 1], ratio_p, edges[1], bins[1], kept)
            count_value(counts[block, 2], iou_p, edges[2], bins[2], kept)
            count_value(counts[block, 3], cosine_p, edges[3], bins[3], kept)


def fused_blocks(pairs: int) -> int:
    """How many blocks fused_kernel splits `pairs` into (the first axis of its `counts`)."""
    return (pairs + PAIRS_PER_BLOCK - 1) // PAIRS_PER_BLOCK


@numba.njit(inline="always", cache=True)
def bin_of(x, edges, bins):  # pragma: no cover - compiled
    """The histogram bin of x as np.histogram finds it: edges[i] <= x < edges[i + 1], the last bin also its right
    edge, x clipped to the range. Guessed from evenly spaced edges, then moved until the edges themselves agree
    (exact for any increasing edges, one step at most for even ones)."""
    low, high = edges[0], edges[bins]
    x = min(max(x, low), high)
    i = min(max(int((x - low) * (bins / (high - low))), 0), bins - 1)
    while i > 0 and x < edges[i]:
        i -= 1
    while i < bins - 1 and x >= edges[i + 1]:
        i += 1
    return i


@numba.njit(inline="always", cache=True)
def count_value(counts, x, edges, bins, kept):  # pragma: no cover - compiled
    """Adds x (unless NaN) to counts[0] and, when kept, to counts[1]."""
    if not np.isnan(x):
        i = bin_of(x, edges, bins)
        counts[0, i] += 1
        if kept:
            counts[1, i] += 1


HISTOGRAM_PARTS = 64  # value ranges counted apart in parallel, then summed


@numba.njit(parallel=True, cache=True)
def histograms(values, edges, kept):  # pragma: no cover - compiled
    """[2, bins] counts of `values` (all, then those where `kept`) by `bin_of`, NaN not counted: one pass in
    parallel instead of np.histogram's sort of every value (for backends without the fused kernel)."""
    bins = edges.size - 1
    parts = np.zeros((HISTOGRAM_PARTS, 2, bins), np.int64)
    step = (values.size + HISTOGRAM_PARTS - 1) // HISTOGRAM_PARTS
    for part in numba.prange(HISTOGRAM_PARTS):
        for p in range(part * step, min(values.size, (part + 1) * step)):
            count_value(parts[part], np.float64(values[p]), edges, bins, kept[p])
    return parts.sum(axis=0)
