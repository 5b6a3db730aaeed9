"""The sentence-pair criteria of the C-STS filter (Deshpande et al. 2023, App. A.2, Table 6).

`Criteria` is the one place that knows the thresholds: which criteria are on, their bounds, pass/fail, and the
cheapest-first order. `score_pairs` computes the cheap metrics for every pair and the cosine only for the pairs that
pass them (or for all, for a full report), with a backend of stages.filter.metrics. `reference_pair_metrics` is the
definition written plainly, one pair at a time: the oracle of the tests and the baseline of bench/filter/metrics.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from csts_pipeline.pipeline.manifest import FilterConfig
from csts_pipeline.stages.filter.text import bag_of_words, char_length, word_count

# Cheapest first: the order in which the funnel applies them and in which `failed` names the first violation.
CRITERIA = ("length", "ratio", "iou", "simcse_cosine")
CHEAP_CRITERIA = CRITERIA[:-1]

# Fixed histogram bins per metric, so shards' counts add up; values beyond the range count in the end bins.
HISTOGRAM_EDGES = {
    "length": np.arange(0, 202, 2, dtype=np.float64),  # characters; the last bin holds 198 and longer
    "ratio": np.linspace(0, 1, 51),
    "iou": np.linspace(0, 1, 51),
    "simcse_cosine": np.linspace(-1, 1, 101),
}


def padded_edges() -> tuple[np.ndarray, np.ndarray]:
    """HISTOGRAM_EDGES in CRITERIA order as one [4, most edges] array (padded with +inf) and the bin counts:
    the form the fused kernel takes."""
    bins = np.array([len(HISTOGRAM_EDGES[name]) - 1 for name in CRITERIA], np.int64)
    edges = np.full((len(CRITERIA), int(bins.max()) + 1), np.inf)
    for row, name in enumerate(CRITERIA):
        edges[row, : bins[row] + 1] = HISTOGRAM_EDGES[name]
    return edges, bins


class PairMetrics(Protocol):
    """What `score_pairs` needs of a backend (stages.filter.metrics: numba on the CPU, torch on a GPU)."""

    def cheap(self, first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def cosine(self, first: np.ndarray, second: np.ndarray) -> np.ndarray: ...


class FusedPairMetrics(PairMetrics, Protocol):
    """A backend that also scores and decides in one compiled pass (stages.filter.metrics.NumbaPairMetrics)."""

    def fused(
        self, first: np.ndarray, second: np.ndarray, low: np.ndarray, high: np.ndarray, cosine_mode: int
    ) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray]]: ...


PAD_ID = np.iinfo(np.int32).max  # pads token-id rows for torch; above every real id, so rows stay sorted


@dataclass(frozen=True)
class Criteria:
    """Thresholds; None switches a bound off. A criterion is on when it has a bound."""

    min_length: int | None = None
    min_ratio: float | None = None
    max_iou: float | None = None
    min_cosine: float | None = None
    max_cosine: float | None = None

    @classmethod
    def from_config(cls, config: FilterConfig) -> Criteria:
        return cls(
            min_length=config.min_length,
            min_ratio=config.min_ratio,
            max_iou=config.max_iou,
            min_cosine=config.min_cosine,
            max_cosine=config.max_cosine,
        )

    def bounds(self, name: str) -> tuple[float | None, float | None]:
        """(minimum, maximum) allowed for criterion `name`; both inclusive."""
        return {
            "length": (self.min_length, None),
            "ratio": (self.min_ratio, None),
            "iou": (None, self.max_iou),
            "simcse_cosine": (self.min_cosine, self.max_cosine),
        }[name]

    def active(self) -> tuple[str, ...]:
        return tuple(name for name in CRITERIA if self.bounds(name) != (None, None))

    @property
    def needs_encoder(self) -> bool:
        return "simcse_cosine" in self.active()

    def rule(self, name: str) -> str:
        low, high = self.bounds(name)
        if low is not None and high is not None:
            return f"{low} <= {name} <= {high}"
        if low is not None:
            return f"{name} >= {low}"
        return f"{name} <= {high}" if high is not None else "off"

    def fails(self, name: str, values):
        """True where `values` (a number or an array) break the criterion's bounds. NaN (a cosine that was not
        computed) never fails."""
        low, high = self.bounds(name)
        failed = np.zeros(np.shape(values), bool) if np.ndim(values) else False
        if low is not None:
            failed = failed | (values < low)
        if high is not None:
            failed = failed | (values > high)
        return failed

    def first_failed(self, metrics: Mapping[str, float]) -> str | None:
        """The first criterion, cheapest first, that one pair's metrics break; None when the pair is kept."""
        return next((name for name in self.active() if self.fails(name, metrics[name])), None)

    def bound_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of every criterion in CRITERIA order as float64, -inf / +inf where a bound is off: the
        form the compiled kernel compares against (x < -inf and x > inf never hold, as an absent bound)."""
        bounds = [self.bounds(name) for name in CRITERIA]
        low = np.array([-np.inf if lo is None else lo for lo, _ in bounds], np.float64)
        high = np.array([np.inf if hi is None else hi for _, hi in bounds], np.float64)
        return low, high

    def as_params(self) -> dict[str, float | int | None]:
        return {
            "min_length": self.min_length,
            "min_ratio": self.min_ratio,
            "max_iou": self.max_iou,
            "min_cosine": self.min_cosine,
            "max_cosine": self.max_cosine,
        }


@dataclass
class ScoredPairs:
    """Metrics and decisions for a batch of pairs. `simcse_cosine` is NaN where it was not computed (criterion
    off, or the pair failed a cheaper criterion first); `first_failed` indexes CRITERIA, -1 for a kept pair.
    `histograms[name]` is [2, bins] over HISTOGRAM_EDGES[name]: every pair with a value, then the kept ones."""

    metrics: dict[str, np.ndarray]
    failed: dict[str, np.ndarray]
    first_failed: np.ndarray
    cosine_computed: np.ndarray
    histograms: dict[str, np.ndarray]

    @property
    def kept(self) -> np.ndarray:
        return self.first_failed < 0

    def __len__(self) -> int:
        return len(self.first_failed)


def score_pairs(
    backend: PairMetrics,
    criteria: Criteria,
    first: np.ndarray,
    second: np.ndarray,
    cosine_for_all: bool = False,
) -> ScoredPairs:
    """Cheap metrics on every pair, then the cosine where it is needed: on the pairs that passed the cheap
    criteria, or on every pair when `cosine_for_all` (exact funnel figures for the cosine)."""
    if hasattr(backend, "fused"):
        return _score_fused(backend, criteria, first, second, cosine_for_all)
    iou, ratio, length = backend.cheap(first, second)
    metrics = {"length": length, "ratio": ratio, "iou": iou}
    active = criteria.active()
    failed = {name: criteria.fails(name, metrics[name]) for name in CHEAP_CRITERIA if name in active}
    cosine = np.full(len(first), np.nan)
    computed = np.zeros(len(first), bool)
    if criteria.needs_encoder:
        computed = np.ones(len(first), bool)
        if not cosine_for_all:
            for mask in failed.values():
                computed &= ~mask
        todo = np.flatnonzero(computed)
        cosine[todo] = backend.cosine(first[todo], second[todo])
        failed["simcse_cosine"] = criteria.fails("simcse_cosine", cosine)
    metrics["simcse_cosine"] = cosine
    first_failed = np.full(len(first), -1, np.int8)
    for code in reversed(range(len(CRITERIA))):
        if CRITERIA[code] in failed:
            first_failed[failed[CRITERIA[code]]] = code
    return ScoredPairs(metrics, failed, first_failed, computed, _histograms(metrics, first_failed < 0))


def _histograms(metrics: dict[str, np.ndarray], kept: np.ndarray) -> dict[str, np.ndarray]:
    """Histogram counts for a backend without the fused kernel: one compiled pass per metric."""
    from csts_pipeline.stages.filter.kernels import histograms

    return {name: histograms(metrics[name], HISTOGRAM_EDGES[name], kept) for name in CRITERIA}


_FIRST_BIT = np.array([-1, 0, 1, 0, 2, 0, 1, 0, 3, 0, 1, 0, 2, 0, 1, 0], np.int8)  # lowest set bit of 0..15


def _score_fused(
    backend: FusedPairMetrics, criteria: Criteria, first: np.ndarray, second: np.ndarray, cosine_for_all: bool
) -> ScoredPairs:
    """score_pairs in one compiled pass; the kernel returns bit c set where CRITERIA[c] fails."""
    mode = (2 if cosine_for_all else 1) if criteria.needs_encoder else 0  # kernels.COSINE_*
    metrics, bits, counts = backend.fused(first, second, *criteria.bound_arrays(), mode)
    active = criteria.active()
    failed = {name: (bits & (1 << code)) != 0 for code, name in enumerate(CRITERIA) if name in active}
    if mode == 2:
        computed = np.ones(len(bits), bool)
    elif mode == 1:
        computed = (bits & 7) == 0
    else:
        computed = np.zeros(len(bits), bool)
    return ScoredPairs(metrics, failed, _FIRST_BIT[bits], computed, counts)


def reference_pair_metrics(
    sentence1: str, sentence2: str, embedding1: np.ndarray | None, embedding2: np.ndarray | None
) -> dict[str, float]:
    """Every criterion's metric for one pair, straight from the two strings (and float64 unit embeddings)."""
    bag1, bag2 = set(bag_of_words(sentence1)), set(bag_of_words(sentence2))
    union = len(bag1 | bag2)
    words1, words2 = word_count(sentence1), word_count(sentence2)
    return {
        "length": min(char_length(sentence1), char_length(sentence2)),
        "ratio": min(words1, words2) / max(words1, words2) if max(words1, words2) else 0.0,
        "iou": len(bag1 & bag2) / union if union else 0.0,
        "simcse_cosine": float(embedding1 @ embedding2) if embedding1 is not None else float("nan"),
    }
