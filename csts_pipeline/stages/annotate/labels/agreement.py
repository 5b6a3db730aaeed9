"""The accepted ratings as arrays, and how far the raters agree (the ratings import); an item's label is
an aggregator's (aggregation/aggregators.py). Agreement is Fleiss' kappa and Krippendorff's alpha over the kept items,
plus each worker against the others, so unreliable workers stand out."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import krippendorff
import numpy as np

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.layout import RATING_SCALE


class Rating(NamedTuple):
    """One accepted rating: the item's index in the rating tasks, and `rating` None when flagged. A language
    model's answer (`annotate rate`) also carries its distribution over 1..5 and its P(not pertinent)."""

    item: int
    worker: str
    assignment: str
    rating: int | None
    not_pertinent: bool
    distribution: tuple[float, ...] | None = None
    p_not_pertinent: float | None = None
    score: float | None = None  # a similarity model's score (its distribution is the score's bin)


# a worker whose ratings follow the others' order this little (leave-one-out Spearman) is flagged for review
FLAG_BELOW = 0.3


class FleissKappa(NamedTuple):
    kappa: float
    observed: float  # mean per-item agreement, P-bar
    expected: float  # chance agreement, P_e


def fleiss_kappa(counts: np.ndarray) -> FleissKappa:
    """Fleiss' kappa from counts[item, category] (raters who chose the category). Items may have different
    numbers of raters (each >= 2): per-item agreement uses the item's own count, category shares pool all
    ratings; with a constant count this is Fleiss (1971) exactly."""
    counts = np.asarray(counts, dtype=np.float64)
    raters = counts.sum(axis=1)
    if counts.shape[0] == 0 or (raters < 2).any():
        raise ValueError("Fleiss' kappa needs at least one item and at least 2 ratings per item")
    observed = float((((counts**2).sum(axis=1) - raters) / (raters * (raters - 1))).mean())
    shares = counts.sum(axis=0) / raters.sum()
    expected = float((shares**2).sum())
    kappa = (observed - expected) / (1 - expected) if expected < 1 else float("nan")
    return FleissKappa(kappa, observed, expected)


def krippendorff_alpha(
    counts: np.ndarray, values: np.ndarray, metric: Literal["nominal", "ordinal", "interval", "ratio"]
) -> float:
    """Krippendorff's alpha of counts[unit, value] over the sorted `values` (nominal, ordinal or interval), by the
    `krippendorff` package; nan when nothing is pairable (no unit with two values) or nothing varies."""
    counts = np.asarray(counts)
    if counts.size == 0 or (counts.sum(axis=1) >= 2).sum() == 0:
        return float("nan")
    with np.errstate(invalid="ignore", divide="ignore"):
        value = krippendorff.alpha(value_counts=counts, value_domain=list(values), level_of_measurement=metric)
    return float(value)


MODEL_WORKER = "model:"  # worker ids of language models start with this (annotate rate)


def is_model_worker(worker: np.ndarray) -> np.ndarray:
    """Per row: the worker is a language model (`model:<name>`), not a person."""
    return np.char.startswith(np.asarray(worker).astype(str), MODEL_WORKER)


@dataclass
class RatingArrays:
    """The accepted ratings as columns; `rated` marks those with a rating (not flagged not pertinent). A model
    worker's rows also carry `distribution` (P(rating = 1..5 | pertinent); rows of nan for people) and `p_flag`
    (P(not pertinent); nan for people); both None when no row has them."""

    item: np.ndarray
    worker: np.ndarray
    rating: np.ndarray
    flagged: np.ndarray
    distribution: np.ndarray | None = None
    p_flag: np.ndarray | None = None
    score: np.ndarray | None = None  # a similarity model's score per row (nan elsewhere); None when no row has one

    @classmethod
    def of(cls, accepted: list[Rating]) -> RatingArrays:
        soft = [a.distribution for a in accepted]
        p_flag = [a.p_not_pertinent for a in accepted]
        has = any(d is not None for d in soft)
        return cls(
            np.array([a.item for a in accepted], np.int64),
            np.array([a.worker for a in accepted]),
            np.array([a.rating if a.rating is not None else 0 for a in accepted], np.float64),
            np.array([a.not_pertinent for a in accepted], bool),
            distribution=np.array([[np.nan] * 5 if d is None else list(d) for d in soft], np.float64).reshape(-1, 5)
            if has
            else None,
            p_flag=np.array([np.nan if p is None else p for p in p_flag], np.float64) if has else None,
            score=np.array([np.nan if a.score is None else a.score for a in accepted], np.float64)
            if any(a.score is not None for a in accepted)
            else None,
        )

    @property
    def soft(self) -> np.ndarray:
        """Per row: it carries a model's distribution."""
        if self.distribution is None:
            return np.zeros(len(self.item), bool)
        return ~np.isnan(self.distribution).any(axis=1)

    @property
    def rated(self) -> np.ndarray:
        """Rows that enter the rater model: people's ratings, and every model answer (its distribution is over
        the ratings given the condition pertinent, so it counts whatever its flag)."""
        return ~self.flagged | self.soft

    @property
    def human(self) -> np.ndarray:
        return ~is_model_worker(self.worker)

    def subset(self, rows: np.ndarray) -> RatingArrays:
        """The rows selected by a mask or an index."""
        pick = None if self.distribution is None else self.distribution[rows]
        flag = None if self.p_flag is None else self.p_flag[rows]
        score = None if self.score is None else self.score[rows]
        return RatingArrays(
            self.item[rows], self.worker[rows], self.rating[rows], self.flagged[rows], distribution=pick, p_flag=flag,
            score=score,
        )  # fmt: skip

    @staticmethod
    def concat(parts: list[RatingArrays]) -> RatingArrays:
        """The rows of every part, in order (distributions of nan for parts without them)."""
        soft = any(p.distribution is not None for p in parts)

        def dist(p: RatingArrays) -> np.ndarray:
            return p.distribution if p.distribution is not None else np.full((len(p.item), 5), np.nan)

        def flag(p: RatingArrays) -> np.ndarray:
            return p.p_flag if p.p_flag is not None else np.full(len(p.item), np.nan)

        return RatingArrays(
            np.concatenate([p.item for p in parts]),
            np.concatenate([p.worker.astype(str) for p in parts]),
            np.concatenate([p.rating for p in parts]),
            np.concatenate([p.flagged for p in parts]),
            distribution=np.concatenate([dist(p) for p in parts]) if soft else None,
            p_flag=np.concatenate([flag(p) for p in parts]) if soft else None,
            score=np.concatenate([np.full(len(p.item), np.nan) if p.score is None else p.score for p in parts])
            if any(p.score is not None for p in parts)
            else None,
        )


@dataclass
class ItemLabels:
    """Per rating item: label (nan without ratings), ratings, answers (ratings and flags), flags, status."""

    label: np.ndarray
    ratings: np.ndarray
    answers: np.ndarray
    flags: np.ndarray
    status: np.ndarray


def agreement_summary(
    ratings: RatingArrays, status: np.ndarray, sample: int | None = None, seed: int = 0
) -> dict[str, Any]:
    """Fleiss' kappa (categories 1-5), Krippendorff's alpha (ordinal, interval) and per-worker agreement over
    the kept items with two or more ratings; with `sample`, also the paper's protocol: the same figures on a
    seeded random sample of `sample` kept items with three or more ratings, three (seeded) ratings each. Among
    people only: a model worker's rows are left out."""
    rated = ratings.rated & ratings.human
    item, worker, rating = ratings.item[rated], ratings.worker[rated], ratings.rating[rated]
    kept = status[item] == "kept"
    item, worker, rating = item[kept], worker[kept], rating[kept]
    shared = np.bincount(item)[item] >= 2
    result = agreement_figures(item[shared], rating[shared])
    result["scope"] = "kept items with two or more ratings; Fleiss' kappa with per-item rater counts"
    result["workers"] = worker_agreement(item, worker, rating)
    result["flag_below"] = FLAG_BELOW
    if sample is not None:
        result["sample"] = sample_agreement(item, rating, sample, seed)
    return result


def agreement_figures(item: np.ndarray, rating: np.ndarray) -> dict[str, Any]:
    """Kappa and alpha of ratings (item codes may have gaps; every item is expected to have 2+ ratings)."""
    low, high = RATING_SCALE
    codes, rows = np.unique(item, return_inverse=True)
    counts = np.zeros((len(codes), high - low + 1), np.int64)
    np.add.at(counts, (rows, rating.astype(np.int64) - low), 1)
    result: dict[str, Any] = {
        "fleiss_kappa": None,
        "alpha_ordinal": None,
        "alpha_interval": None,
        "observed_agreement": None,
        "chance_agreement": None,
        "items": len(codes),
        "ratings": len(rating),
        "ratings_per_item": {str(k): int(v) for k, v in sorted(Counter(counts.sum(axis=1).tolist()).items())},
        "categories": list(range(low, high + 1)),
    }
    if len(codes):
        kappa = fleiss_kappa(counts)
        result["fleiss_kappa"] = None if np.isnan(kappa.kappa) else round(kappa.kappa, 4)
        result["observed_agreement"] = round(kappa.observed, 4)
        result["chance_agreement"] = round(kappa.expected, 4)
        for metric in ("ordinal", "interval"):
            value = krippendorff_alpha(counts, np.arange(low, high + 1), metric)
            result[f"alpha_{metric}"] = None if np.isnan(value) else round(value, 4)
    return result


def sample_agreement(item: np.ndarray, rating: np.ndarray, sample: int, seed: int, per_item: int = 3) -> dict:
    """The paper's protocol (agreement on 100 instances with three ratings each): `sample` kept items drawn at
    random among those with `per_item` or more ratings, `per_item` of each item's ratings drawn at random."""
    if sample < 1:
        raise UserError(f"--agreement-sample must be at least 1 (got {sample})")
    rng = np.random.default_rng(seed)
    count = np.bincount(item)
    eligible = np.flatnonzero(count >= per_item)
    chosen = rng.choice(eligible, min(sample, len(eligible)), replace=False)
    rows = np.flatnonzero(np.isin(item, chosen))
    order = rows[np.lexsort((rng.random(len(rows)), item[rows]))]
    rank = np.arange(len(order)) - np.searchsorted(item[order], item[order])  # position within the item
    take = order[rank < per_item]
    result = agreement_figures(item[take], rating[take])
    result |= {"asked": sample, "seed": seed, "ratings_each": per_item, "eligible_items": len(eligible)}
    result["scope"] = f"{len(chosen)} random kept items with {per_item}+ ratings, {per_item} random ratings each"
    return result


def worker_agreement(item: np.ndarray, worker: np.ndarray, rating: np.ndarray) -> list[dict[str, Any]]:
    """Each worker against the others on the items they share: Spearman's rho of the worker's ratings with the
    mean of the other raters' ratings on the same items, mean |difference|, and the share within 1 point. Only
    items with two or more ratings count; least agreeing workers first."""
    count = np.bincount(item)
    total = np.bincount(item, weights=rating)
    shared = count[item] >= 2
    item, worker, rating = item[shared], worker[shared], rating[shared]
    others = (total[item] - rating) / (count[item] - 1)
    names, codes = np.unique(worker, return_inverse=True)
    n = np.bincount(codes, minlength=len(names))
    difference = np.abs(rating - others)
    mean_abs = np.bincount(codes, weights=difference, minlength=len(names)) / np.maximum(n, 1)
    within = np.bincount(codes, weights=difference <= 1, minlength=len(names)) / np.maximum(n, 1)
    varies = (n >= 3) & _varies(codes, rating, len(names)) & _varies(codes, others, len(names))
    rho = grouped_spearman(codes, rating, others, len(names))
    rows = [
        {
            "worker_id": str(name),
            "items": int(n[w]),
            "spearman": round(float(rho[w]), 4) if varies[w] else None,
            "mean_abs_diff": round(float(mean_abs[w]), 4),
            "within_1": round(float(within[w]), 4),
            "flagged": bool(varies[w] and rho[w] < FLAG_BELOW),
        }
        for w, name in enumerate(names)
    ]
    return sorted(rows, key=lambda r: (r["spearman"] is not None, r["spearman"] or 0.0, -r["items"]))


def _varies(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per group: its values are not all equal (np.ptp > 0)."""
    high, low = np.full(n, -np.inf), np.full(n, np.inf)
    np.maximum.at(high, group, values)
    np.minimum.at(low, group, values)
    return high > low


def grouped_spearman(group: np.ndarray, x: np.ndarray, y: np.ndarray, n: int) -> np.ndarray:
    """Per group 0..n-1, Spearman's rho of its x and y (ties ranked by their mean rank, as scipy's spearmanr),
    for all groups at once: scipy's per-group call was the import's slowest loop with thousands of workers
    (nan where a group's ranks do not vary)."""
    rx, ry = _grouped_ranks(group, x, n), _grouped_ranks(group, y, n)
    size = np.maximum(np.bincount(group, minlength=n), 1)
    dx = rx - (np.bincount(group, weights=rx, minlength=n) / size)[group]
    dy = ry - (np.bincount(group, weights=ry, minlength=n) / size)[group]
    with np.errstate(invalid="ignore", divide="ignore"):
        sxy = np.bincount(group, weights=dx * dy, minlength=n)
        sxx, syy = np.bincount(group, weights=dx * dx, minlength=n), np.bincount(group, weights=dy * dy, minlength=n)
        return np.clip(sxy / np.sqrt(sxx * syy), -1.0, 1.0)


def _grouped_ranks(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Each value's rank (1-based, ties averaged) among its group's values."""
    if len(values) == 0:  # no worker shares an item with another (one rating an item)
        return np.zeros(0)
    order = np.lexsort((values, group))
    g, v = group[order], values[order]
    first = np.searchsorted(g, np.arange(n))  # where each group starts in the sorted order
    new_run = np.r_[True, (g[1:] != g[:-1]) | (v[1:] != v[:-1])]
    run = np.cumsum(new_run) - 1
    starts = np.flatnonzero(new_run)
    ends = np.r_[starts[1:], len(v)]  # one past each run's last
    mean_rank = (starts + ends - 1) / 2 - first[g[starts]] + 1
    ranks = np.empty(len(values))
    ranks[order] = mean_rank[run]
    return ranks
