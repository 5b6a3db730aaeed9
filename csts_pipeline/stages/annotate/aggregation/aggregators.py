"""Aggregators: from the accepted ratings to one label per item, as classes in crowd-kit's shape.

Each class is one label policy and holds its own maths: options in the constructor (keyword-only), the answers
and the batch's evidence to `fit(ratings, n_items, evidence)`, which returns the aggregator itself with `labels_`
(label, counts, status per item) and, for the rater model, its results as attributes (`result_`, `probas_`,
`intervals_`, `workers_`, `plan_`); `fit_predict` returns `labels_`. Defining a subclass with a `name` registers
it: `--aggregate` takes the names of `REGISTERED`, the ratings import looks the policy up there (`aggregator`) and
the dataset card states its `card` sentence. A new policy is one class here plus its test.

The module imports numpy only, so the command line can list the policies without loading the statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from csts_pipeline.pipeline.errors import UserError

if TYPE_CHECKING:
    from csts_pipeline.stages.annotate.aggregation.quality import ModelResult
    from csts_pipeline.stages.annotate.aggregation.trust import TrustPlan
    from csts_pipeline.stages.annotate.aggregation.weighing import Evidence
    from csts_pipeline.stages.annotate.labels.agreement import ItemLabels, RatingArrays

REGISTERED: dict[str, type[Aggregator]] = {}  # --aggregate name -> class, in the order they are defined


class Aggregator:
    """A label policy: the options every policy takes, `fit`, and the results it leaves. A subclass with a `name`
    is registered under it; `help` says it in `--aggregate`'s help, `card` in the dataset card."""

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""
    card: ClassVar[str] = ""

    def __init__(self, *, not_pertinent_share: float = 0.5, min_ratings: int = 1):
        self.not_pertinent_share = not_pertinent_share
        self.min_ratings = min_ratings
        self.result_: ModelResult | None = None
        self.labels_: ItemLabels  # set by fit

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            if cls.name in REGISTERED:
                raise TypeError(f"aggregator name {cls.name!r} is taken by {REGISTERED[cls.name].__qualname__}")
            REGISTERED[cls.name] = cls

    def fit(self, ratings: RatingArrays, n_items: int, evidence: Evidence | None = None) -> Aggregator:
        """Label the `n_items` items from `ratings`; `evidence` (the gold, the expert sample, the qualification
        test, the kinds of condition, the controls) only the rater model reads."""
        raise NotImplementedError

    def fit_predict(self, ratings: RatingArrays, n_items: int, evidence: Evidence | None = None) -> ItemLabels:
        return self.fit(ratings, n_items, evidence).labels_


class PerItem(Aggregator):
    """A policy that reads each item's people's ratings alone (`item_label`); flags decide not pertinent by their
    share of answers. A model worker's rows are left out: only a rater model can weigh a model against people."""

    @staticmethod
    def item_label(item: np.ndarray, rating: np.ndarray, n_items: int) -> np.ndarray:
        """Per item, the label of its ratings (`item`: the item of each rating); nan without any."""
        raise NotImplementedError

    def fit(self, ratings: RatingArrays, n_items: int, evidence: Evidence | None = None) -> Aggregator:
        from csts_pipeline.stages.annotate.labels.agreement import ItemLabels

        people = ratings.subset(ratings.human)
        rated = people.rated
        n_ratings = np.bincount(people.item[rated], minlength=n_items)
        label = self.item_label(people.item[rated], people.rating[rated], n_items)
        answers = np.bincount(people.item, minlength=n_items)
        flags = np.bincount(people.item, weights=people.flagged, minlength=n_items).astype(np.int64)
        status = np.full(n_items, "kept", dtype=object)
        status[n_ratings < self.min_ratings] = "too_few_ratings"
        with np.errstate(invalid="ignore", divide="ignore"):
            status[flags / answers > self.not_pertinent_share] = "not_pertinent"
        status[answers == 0] = "unanswered"
        self.labels_ = ItemLabels(label, n_ratings, answers, flags, status)
        return self


def _medians(item: np.ndarray, rating: np.ndarray, n_items: int) -> np.ndarray:
    """Per item, the median of its ratings (halfway between the two middle ones for an even count); nan without."""
    count = np.bincount(item, minlength=n_items)
    label = np.full(n_items, np.nan)
    has = count > 0
    ordered = rating[np.lexsort((rating, item))]
    starts = np.cumsum(count) - count
    label[has] = (ordered[(starts + (count - 1) // 2)[has]] + ordered[(starts + count // 2)[has]]) / 2
    return label


class Mean(PerItem):
    name: ClassVar[str] = "mean"
    help: ClassVar[str] = "mean (the paper's label)"
    card: ClassVar[str] = "Labels per item: mean of its ratings."

    @staticmethod
    def item_label(item: np.ndarray, rating: np.ndarray, n_items: int) -> np.ndarray:
        count = np.bincount(item, minlength=n_items)
        total = np.bincount(item, weights=rating, minlength=n_items)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / count, np.nan)


class Median(PerItem):
    name: ClassVar[str] = "median"
    help: ClassVar[str] = "median"
    card: ClassVar[str] = "Labels per item: median of its ratings."

    @staticmethod
    def item_label(item: np.ndarray, rating: np.ndarray, n_items: int) -> np.ndarray:
        return _medians(item, rating, n_items)


class RoundedMedian(PerItem):
    """The median rounded to an integer, halves up (3.5 -> 4), as the paper's released integer labels."""

    name: ClassVar[str] = "round"
    help: ClassVar[str] = "round (the median rounded to an integer, as the paper's released labels)"
    card: ClassVar[str] = "Labels per item: round of its ratings."

    @staticmethod
    def item_label(item: np.ndarray, rating: np.ndarray, n_items: int) -> np.ndarray:
        return np.floor(_medians(item, rating, n_items) + 0.5)


class OrdinalModel(Aggregator):
    """The rater model (ordinal.fit, weighed by the batch's evidence: quality.model_labels) with the worker-skill
    not-pertinent verdict. `fit`'s evidence: the hidden gold (fitted alongside with its labels fixed), the expert
    sample, the qualification test, each item's kind of condition and the scored controls (a language model's
    flags). `result_` keeps the whole fit for the workers table and the published distributions."""

    name: ClassVar[str] = "model"
    help: ClassVar[str] = (
        "model (a rater model that learns how each worker uses the scale, as far as their answers show it: a "
        "distribution and a 90% interval per item, ratings/workers.parquet)"
    )
    card: ClassVar[str] = (
        "Labels per item: the posterior mean, on the crowd's scale, of a rater model fitted to all ratings by EM, "
        "which estimates how each worker uses the scale (a bias and noise to start from, their own confusion as "
        "far as their answers show it) and weighs their ratings accordingly; each item's posterior over 1-5 and "
        "its 90% interval are published with the individual ratings (below). The not-pertinent verdict is "
        "Dawid-Skene's over the raters' flags."
    )

    def __init__(self, *, not_pertinent_share: float = 0.5, min_ratings: int = 1, ambiguity: float | None = None):
        super().__init__(not_pertinent_share=not_pertinent_share, min_ratings=min_ratings)
        self.ambiguity = ambiguity  # the shared shift's sd (`--ambiguity-sd`); None: chosen from the answers
        self.probas_: np.ndarray  # [items, label]: each item's posterior over the true label 1..5
        self.intervals_: tuple[np.ndarray, np.ndarray]  # each item's 90% interval, lo and hi
        self.workers_: dict[str, float]  # each worker's reliability (one definition: kernel.reliability)
        self.plan_: TrustPlan | None = None  # what the batch's evidence settled about whom to trust

    def fit(self, ratings: RatingArrays, n_items: int, evidence: Evidence | None = None) -> Aggregator:
        from csts_pipeline.stages.annotate.aggregation.quality import model_labels
        from csts_pipeline.stages.annotate.aggregation.weighing import Evidence

        self.labels_, self.result_ = model_labels(
            ratings,
            n_items,
            not_pertinent_share=self.not_pertinent_share,
            min_ratings=self.min_ratings,
            ambiguity=self.ambiguity,
            evidence=evidence or Evidence(),
        )
        fitted = self.result_.fit
        self.probas_ = fitted.posterior
        self.intervals_ = (self.result_.low, self.result_.high)
        self.workers_ = {str(w): float(r) for w, r in zip(fitted.workers, fitted.reliability)}
        self.plan_ = self.result_.plan
        return self


def aggregator_help() -> str:
    """`--aggregate`'s help: every registered policy."""
    return f"ratings: an item's label, {', '.join(kind.help for kind in REGISTERED.values())}."


def aggregator_class(how: str) -> type[Aggregator]:
    """The class `--aggregate how` names; a one-line error naming the registered ones otherwise."""
    if how not in REGISTERED:
        *others, last = REGISTERED
        raise UserError(f"--aggregate must be {', '.join(others)} or {last} (got {how!r})")
    return REGISTERED[how]


def aggregator(how: str, *, not_pertinent_share: float, min_ratings: int, ambiguity: float | None = None) -> Aggregator:
    """The policy `--aggregate how` names, with the import's options (`ambiguity`: only the rater model's)."""
    cls = aggregator_class(how)
    if issubclass(cls, OrdinalModel):
        return cls(not_pertinent_share=not_pertinent_share, min_ratings=min_ratings, ambiguity=ambiguity)
    return cls(not_pertinent_share=not_pertinent_share, min_ratings=min_ratings)
