"""A batch's answers as the rater model's EM reads them (aggregation/em/ordinal.py): item and worker indexes, each
answer's distribution and most likely digit, which workers are models, which items have a known label, which
rows are a similarity model's scores, and whom the evidence holds where (aggregation/trust.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from csts_pipeline.stages.annotate.aggregation import thresholds
from csts_pipeline.stages.annotate.aggregation.em import score_density
from csts_pipeline.stages.annotate.aggregation.em.em_sums import SCALE, Layout

FAMILY_SEP = " @ "  # a model fitted per kind of condition: "model:<name> @ colour", one family of tables


def answer_matrix(rating: np.ndarray, soft: np.ndarray | None) -> np.ndarray:
    """Each answer as a distribution over 1..5, [answers, y]: one-hot for a hard rating, the row of `soft` where
    it has one (rows of nan in `soft` mark hard ratings)."""
    hard = np.eye(len(SCALE))[np.clip(np.rint(rating).astype(np.int64), 1, len(SCALE)) - 1]
    if soft is None:
        return hard
    soft = np.asarray(soft, np.float64)
    has = ~np.isnan(soft).any(axis=1)
    rows = np.clip(np.nan_to_num(soft[has]), 0.0, None)
    hard[has] = rows / np.maximum(rows.sum(axis=1, keepdims=True), 1e-12)
    return hard


@dataclass
class Answers:
    """A batch's answers as the EM reads them: item and worker indexes, each answer's distribution and most likely
    digit, which workers are models (a free confusion), and per item the true labels it may have (one for a
    control with a known answer)."""

    item: np.ndarray
    code: np.ndarray
    workers: np.ndarray
    answers: np.ndarray
    digits: np.ndarray
    free: np.ndarray
    allowed: np.ndarray
    answered: np.ndarray  # answered and not a control: the items the label prior is the mean of
    heard: np.ndarray
    family: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per worker its model, -1: people
    pinned: np.ndarray | None = None  # per worker the noise it is held at (nan: fitted); trust.py says when
    z: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per row a model score's normal score, nan: none
    label_prior: np.ndarray | None = None  # held, where a sample of the batch's labels measured it
    known_value: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per item its known label as given (0: none)
    density_on_known: bool = False  # scored models measured on the items of known label alone (trust.KNOWN)

    @property
    def scored(self) -> np.ndarray:
        """The rows whose answer is a score, read by its density (score_density.py), not a table."""
        return np.flatnonzero(~np.isnan(self.z)) if len(self.z) else np.zeros(0, np.int64)

    def hold(self, people_noise: float | dict[str, float] | None) -> None:
        """Hold every person's noise at `people_noise`, one for all or per worker id (a person not named keeps
        the mean of those named); models stay fitted."""
        if people_noise is None:
            return
        if isinstance(people_noise, dict):
            fallback = float(np.exp(np.mean(np.log(list(people_noise.values()))))) if people_noise else 1.0
            each = np.array([people_noise.get(str(w), fallback) for w in self.workers], np.float64)
        else:
            each = np.full(len(self.workers), float(people_noise))
        self.pinned = np.where(self.free, np.nan, each)

    @property
    def n_items(self) -> int:
        return len(self.allowed)

    @cached_property
    def layout(self) -> Layout:
        """The answers arranged for joint_posterior, once for all the EM's iterations."""
        return Layout.of(self.item, self.code, self.answers, len(self.workers), self.n_items)

    @cached_property
    def count_layout(self) -> Layout:
        """The most likely digits arranged for worker_counts, once for all the EM's iterations."""
        return Layout.of(self.item, self.code, self.digits, len(self.workers), self.n_items)

    def without_models(self) -> Answers:
        """The people's answers alone (every item kept, a model's rows dropped)."""
        rows = ~self.free[self.code]
        kept = np.flatnonzero(np.bincount(self.code[rows], minlength=len(self.workers)) > 0)
        code = np.searchsorted(kept, self.code[rows])
        heard = np.bincount(self.item[rows], minlength=self.n_items) > 0
        return Answers(item=self.item[rows], code=code, workers=self.workers[kept], answers=self.answers[rows],
                       digits=self.digits[rows], free=self.free[kept], allowed=self.allowed,
                       answered=heard & self.answered, heard=heard, family=self.family[kept],
                       pinned=None if self.pinned is None else self.pinned[kept],
                       z=self.z[rows] if len(self.z) else self.z, label_prior=self.label_prior,
                       known_value=self.known_value, density_on_known=self.density_on_known)  # fmt: skip


def answers_of(
    item: np.ndarray,
    worker: np.ndarray,
    rating: np.ndarray,
    n_items: int,
    *,
    known: np.ndarray | None,
    soft: np.ndarray | None,
    score: np.ndarray | None = None,
) -> Answers:
    """The ratings checked (hard ones integers 1-5) and indexed for EM; a scored row's answer leaves the tables
    (its distribution all ones, no digit) for its density."""
    workers, code = np.unique(np.asarray(worker).astype(str), return_inverse=True)
    rating = np.asarray(rating, np.float64)
    hard = np.ones(len(rating), bool) if soft is None else np.isnan(np.asarray(soft, np.float64)).any(axis=1)
    checked = rating[hard]
    if len(checked) and (checked.min() < 1 or checked.max() > 5 or (checked != np.round(checked)).any()):
        raise ValueError("ratings must be integers from 1 to 5")
    answers = answer_matrix(rating, soft)
    free = np.bincount(code, weights=~hard, minlength=len(workers)) > 0  # model workers: a free confusion
    known_value = np.zeros(n_items) if known is None else np.asarray(known, np.float64)
    fixed = known_value > 0
    allowed = np.ones((n_items, len(SCALE)))
    allowed[fixed] = np.eye(len(SCALE))[rounded(known_value[fixed]) - 1]
    heard = np.bincount(item, minlength=n_items) > 0
    digits = np.eye(len(SCALE))[np.argmax(answers, axis=1)]  # what the tables are estimated from
    family = families(workers, free)
    z = np.zeros(0)
    if score is not None and np.isfinite(score).any():
        z = score_density.normal_scores(
            np.where(np.isfinite(score), score, np.nan), np.where(np.isfinite(score), family[code], -1)
        )
        answers[~np.isnan(z)], digits[~np.isnan(z)] = 1.0, 0.0
    return Answers(
        item=np.asarray(item),
        code=code,
        workers=workers,
        answers=answers,
        digits=digits,
        free=free,
        allowed=allowed,
        answered=heard & ~fixed,
        heard=heard,
        family=family,
        z=z,
        known_value=known_value,
    )


def rounded(labels: np.ndarray) -> np.ndarray:
    """A known label as the fit reads it: the nearest of 1..5, halves up (an expert's 3.47 is a 3)."""
    return np.floor(np.asarray(labels, np.float64) + 0.5).astype(np.int64)


def families(workers: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Per worker, the index of the model it is one kind of (the name before FAMILY_SEP); -1 for people."""
    names = np.array([str(w).partition(FAMILY_SEP)[0] for w in workers], dtype=str)
    _, index = np.unique(names, return_inverse=True)
    return np.where(free, index.reshape(-1), -1)


def known_items(data: Answers) -> np.ndarray:
    """Items whose true label is fixed (the expert sample, the gold) and that people answered."""
    return (data.allowed.sum(axis=1) == 1) & data.heard


def answers_prior(data: Answers) -> np.ndarray | None:
    """The people's answers' own distribution over 1..5 (plus one per label), held as the label prior where fewer
    than MIN_EVIDENCE items have two answers (people's or models'): one answer an item cannot tell how widely the
    true labels spread from how noisy the people are, and the prior EM learnt there collapsed onto two labels
    (USTS-C, one rating an item: an answer of 5 read as a 3 at 0.91; the answers' own distribution covered 0.93 of
    the items). None where the items measure it, or no person answered."""
    people = ~data.free[data.code]
    if (np.bincount(data.item, minlength=data.n_items) >= 2).sum() >= thresholds.MIN_EVIDENCE or not people.any():
        return None
    counts = data.answers[people].sum(axis=0)
    return (counts + 1) / (counts.sum() + len(SCALE))
