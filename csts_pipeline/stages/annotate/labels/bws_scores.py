"""Best-Worst Scaling (BWS) for C-STS items: the 4-tuple design, counting scores and split-half reliability.

An item is one (sentence1, sentence2, condition). Workers see four items at a time and pick the most and the
least similar one; BWS gives finer and more reliable scores than a 1-5 rating for the same effort (STR-2022,
Kiritchenko and Mohammad 2017). steps.bws exports the tuples and imports the answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.labels.sampling import hash64

TUPLE_SIZE = 4
_PAIRS = np.array([(a, b) for a in range(TUPLE_SIZE) for b in range(a + 1, TUPLE_SIZE)])


# ----------------------------------------------------------------------------------------------- tuple design


def design_tuples(n_items: int, seed: int, appearances: int = 8, tries: int = 20) -> np.ndarray:
    """About `appearances * n_items / 4` (2N by default) 4-tuples of item indices: `appearances` rounds, each a
    seeded permutation of all items cut into fours, so every item appears `appearances` times (one more for a
    few when N*appearances is not a multiple of 4). Of `tries` designs, the one whose most frequent pair of
    items shares the fewest tuples is kept, so no two items are compared mostly with each other. Permutations
    come from a hash of (item, round, seed), so a seed gives the same tuples with any numpy version."""
    if n_items < TUPLE_SIZE:
        raise UserError(f"Best-Worst Scaling needs at least {TUPLE_SIZE} items (got {n_items})")
    if appearances < 1:
        raise UserError(f"--appearances must be at least 1 (got {appearances})")
    best, best_key = None, None
    for attempt in range(max(tries, 1)):
        tuples = _one_design(n_items, appearances, seed, attempt)
        pairs = cooccurrence(tuples, n_items)
        key = (int(pairs.max()), int((pairs == pairs.max()).sum()))
        if best_key is None or key < best_key:
            best, best_key = tuples, key
    assert best is not None  # at least one attempt
    return best


def _permutation(n_items: int, seed: int, stream: int) -> np.ndarray:
    return np.argsort(hash64(np.arange(n_items, dtype=np.int64) + stream * n_items, seed), kind="stable")


def _one_design(n_items: int, appearances: int, seed: int, attempt: int) -> np.ndarray:
    """`appearances` permutations laid end to end, padded with the first items of a further one, cut into fours;
    a tuple that holds an item twice (where two permutations meet) is repaired by swaps."""
    first = attempt * (appearances + 1)
    sequence = np.concatenate([_permutation(n_items, seed, first + r) for r in range(appearances + 1)])
    sequence = sequence[: n_items * appearances + (-n_items * appearances) % TUPLE_SIZE]
    tuples = sequence.reshape(-1, TUPLE_SIZE)
    _repair(tuples, seed)
    return tuples


def _has_repeat(tuples: np.ndarray) -> np.ndarray:
    ordered = np.sort(tuples, axis=1)
    return (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)


def _repair(tuples: np.ndarray, seed: int) -> None:
    """Swap each repeated item with one of another tuple where neither swap creates a repeat (the partner picked
    by a seeded hash); only the few tuples at permutation seams can need it, so the loop is over those."""
    for t in np.flatnonzero(_has_repeat(tuples)):
        row = tuples[t]
        _, first = np.unique(row, return_index=True)
        for p in np.setdiff1d(np.arange(TUPLE_SIZE), first):
            value = row[p]
            # tuples without `value`, and positions in them holding an item not in row t
            free = ~(tuples == value).any(axis=1)
            free[t] = False
            candidates = np.argwhere(free[:, None] & ~np.isin(tuples, row))
            if len(candidates) == 0:
                raise UserError(f"cannot build 4-tuples without repeats from {len(np.unique(tuples))} items")
            pick = int(hash64(np.array([t * TUPLE_SIZE + p]), seed)[0] % np.uint64(len(candidates)))
            u, q = candidates[pick]
            row[p], tuples[u, q] = tuples[u, q], value


def cooccurrence(tuples: np.ndarray, n_items: int) -> np.ndarray:
    """How many tuples each co-occurring pair of items shares (one count per distinct pair)."""
    a, b = tuples[:, _PAIRS[:, 0]].ravel(), tuples[:, _PAIRS[:, 1]].ravel()
    key = np.minimum(a, b).astype(np.int64) * n_items + np.maximum(a, b)
    return np.unique(key, return_counts=True)[1]


def design_stats(tuples: np.ndarray, n_items: int) -> dict[str, Any]:
    """What the stage record keeps about a design: appearances per item and the most frequent co-occurrence."""
    seen = np.bincount(tuples.ravel(), minlength=n_items)
    pairs = cooccurrence(tuples, n_items)
    return {
        "items": n_items,
        "tuples": len(tuples),
        "appearances_min": int(seen.min()),
        "appearances_max": int(seen.max()),
        "appearances_mean": round(float(seen.mean()), 4),
        "max_cooccurrence": int(pairs.max()),
        "pairs_at_max_cooccurrence": int((pairs == pairs.max()).sum()),
        "pairs_sharing_2_plus_tuples": int((pairs >= 2).sum()),
    }


# --------------------------------------------------------------------------------------------------- scoring


@dataclass
class Annotations:
    """One row per accepted best/worst answer: the tuple (index into the design), the chosen items (item
    indices) and the worker."""

    tuple_index: np.ndarray
    best: np.ndarray
    worst: np.ndarray
    worker: np.ndarray

    def __len__(self) -> int:
        return len(self.tuple_index)

    def take(self, rows: np.ndarray) -> Annotations:
        return Annotations(self.tuple_index[rows], self.best[rows], self.worst[rows], self.worker[rows])


@dataclass
class Scores:
    """Per item: times chosen best and worst, times seen in annotated tuples, and the counting score
    (best - worst) / seen in [-1, 1] (nan when never seen)."""

    best: np.ndarray
    worst: np.ndarray
    seen: np.ndarray
    score: np.ndarray

    @property
    def unit(self) -> np.ndarray:
        """The score rescaled to [0, 1]."""
        return (self.score + 1) / 2

    @property
    def likert(self) -> np.ndarray:
        """The score mapped linearly onto the C-STS scale 1-5 (1 + 4 * unit), for `annotate split`."""
        return 1 + 4 * self.unit


def counting_scores(tuples: np.ndarray, annotations: Annotations, n_items: int) -> Scores:
    """Counting scores: every annotation of a tuple counts each of its four items as seen once."""
    best = np.bincount(annotations.best, minlength=n_items)
    worst = np.bincount(annotations.worst, minlength=n_items)
    seen = np.bincount(tuples[annotations.tuple_index].ravel(), minlength=n_items)
    score = np.full(n_items, np.nan)
    has = seen > 0
    score[has] = (best[has] - worst[has]) / seen[has]
    return Scores(best, worst, seen, score)


# ----------------------------------------------------------------------------------------------- reliability


def split_half(tuples: np.ndarray, annotations: Annotations, n_items: int, repeats: int, seed: int) -> dict[str, Any]:
    """Split-half reliability (STR-2022): each tuple's annotations are split at random into two halves (an odd
    one out goes to either half by a coin), items are scored from each half, and the Spearman between the two
    score lists is averaged over `repeats` splits. Items not seen in both halves are left out of a repeat.
    The Spearman-Brown corrected figure 2r / (1 + r) estimates the reliability of the full set, not a half."""
    if repeats < 1:
        raise UserError(f"--repeats must be at least 1 (got {repeats})")
    per_tuple = np.bincount(annotations.tuple_index, minlength=len(tuples))
    result: dict[str, Any] = {"repeats": repeats, "seed": seed, "spearman": None, "spearman_brown": None}
    result["tuples_with_2_plus_annotations"] = int((per_tuple >= 2).sum())
    if result["tuples_with_2_plus_annotations"] == 0:
        result["note"] = "no tuple has two or more annotations: nothing to split"
        return result
    rng = np.random.default_rng(seed)
    owner = annotations.tuple_index
    starts = np.cumsum(per_tuple) - per_tuple
    rhos = np.empty(repeats)
    for r in range(repeats):
        order = np.lexsort((rng.random(len(annotations)), owner))  # by tuple, then at random
        position = np.empty(len(annotations), np.int64)  # each answer's random rank within its tuple
        position[order] = np.arange(len(annotations)) - starts[owner[order]]
        coin = rng.integers(0, 2, len(tuples))
        first = position < (per_tuple + coin)[owner] // 2
        half_a = counting_scores(tuples, annotations.take(first), n_items).score
        half_b = counting_scores(tuples, annotations.take(~first), n_items).score
        both = ~np.isnan(half_a) & ~np.isnan(half_b)
        rhos[r] = _spearman(half_a[both], half_b[both])
    valid = rhos[~np.isnan(rhos)]
    if len(valid):
        rho = float(valid.mean())
        result["spearman"] = round(rho, 4)
        result["spearman_brown"] = round(2 * rho / (1 + rho), 4) if rho > -1 else None
        result["spearman_sd"] = round(float(valid.std()), 4)
    return result


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho as the Pearson correlation of average ranks; nan with fewer than 3 items or no spread."""
    if len(a) < 3:
        return float("nan")
    ra, rb = rankdata(a), rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = np.sqrt((ra**2).sum() * (rb**2).sum())
    return float((ra * rb).sum() / denominator) if denominator > 0 else float("nan")
