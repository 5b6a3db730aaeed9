"""Aggregators: from the accepted ratings to one label per item, as classes with `fit` (the crowd-kit shape).

Every aggregator takes the same ratings and returns `ItemLabels` (label, counts, status); the ordinal rater model
also keeps its fitted `result` (posterior, intervals, the not-pertinent verdict, each worker's reliability). The
ratings import picks one by `--aggregate` (`aggregator`); a new rater, a model or a new policy plugs in here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import numpy as np

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.labels.agreement import ItemLabels, RatingArrays, label_items
from csts_pipeline.stages.annotate.labels.quality import Anchor, ModelResult, model_labels


class Aggregator(Protocol):
    """What the ratings import needs of a label policy."""

    name: ClassVar[str]
    result: ModelResult | None

    def fit(self, ratings: RatingArrays, n_items: int) -> ItemLabels: ...


@dataclass
class _Plain:
    """A policy that reads each item's ratings alone; flags decide not pertinent by their share of answers."""

    not_pertinent_share: float
    min_ratings: int
    result: ModelResult | None = field(default=None, init=False)
    name: ClassVar[str] = ""

    def fit(self, ratings: RatingArrays, n_items: int) -> ItemLabels:
        return label_items(ratings, n_items, self.name, self.not_pertinent_share, self.min_ratings)


class Mean(_Plain):
    """The mean of an item's ratings (the paper's label)."""

    name: ClassVar[str] = "mean"


class Median(_Plain):
    """The median of an item's ratings (halfway between the two middle ones for an even count)."""

    name: ClassVar[str] = "median"


class RoundedMedian(_Plain):
    """The median rounded to an integer, halves up (3.5 -> 4), as the paper's released integer labels."""

    name: ClassVar[str] = "round"


@dataclass
class OrdinalModel:
    """The ordinal rater model's posterior mean (labels/ordinal.py), with the worker-skill not-pertinent verdict;
    `anchor` (hidden gold's ratings and true labels) is fitted alongside with its labels fixed."""

    not_pertinent_share: float
    min_ratings: int
    anchor: Anchor | None = None
    kinds: np.ndarray | None = None  # per item, then per gold item: its condition's kind (model_workers)
    result: ModelResult | None = field(default=None, init=False)
    name: ClassVar[str] = "model"

    def fit(self, ratings: RatingArrays, n_items: int) -> ItemLabels:
        share, least = self.not_pertinent_share, self.min_ratings
        labels, self.result = model_labels(ratings, n_items, share, least, self.anchor, self.kinds)
        return labels


AGGREGATORS: dict[str, type[_Plain] | type[OrdinalModel]] = {
    kind.name: kind for kind in (Mean, Median, RoundedMedian, OrdinalModel)
}


def aggregator(
    how: str,
    not_pertinent_share: float,
    min_ratings: int,
    anchor: Anchor | None = None,
    kinds: np.ndarray | None = None,
) -> Aggregator:
    """The aggregator `--aggregate how` names (mean, median, round or model)."""
    if how not in AGGREGATORS:
        raise UserError(f"--aggregate must be {', '.join(AGGREGATORS)} (got {how!r})")
    if how == OrdinalModel.name:
        return OrdinalModel(not_pertinent_share, min_ratings, anchor, kinds)
    return AGGREGATORS[how](not_pertinent_share, min_ratings)
