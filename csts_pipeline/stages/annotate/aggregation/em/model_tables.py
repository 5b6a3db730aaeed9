"""A model worker's P(y | t) in the ordinal rater model (aggregation/em/ordinal.py): a free 5 x 5 confusion estimated
from its expected counts and shrunk toward its family's table, or, for a similarity model, read from its score
density (score_density.py)."""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from csts_pipeline.stages.annotate.aggregation import thresholds
from csts_pipeline.stages.annotate.aggregation.em import score_density
from csts_pipeline.stages.annotate.aggregation.em.em_answers import Answers
from csts_pipeline.stages.annotate.aggregation.em.em_sums import SCALE


def free_tables(counts: np.ndarray, kernel: np.ndarray, free: np.ndarray, family: np.ndarray) -> np.ndarray:
    """The workers' P(y | t): the fitted kernel, and for the `free` workers (models, who answer every item) a
    free 5 x 5 confusion. A model fitted per kind of condition is a family of free workers (`family`: per worker
    its family's index, -1 for people): the family's table over all its kinds is estimated from their expected
    counts with FREE_PSEUDO answers per true label spread as its answers overall (whatever the truth), so a row
    with little evidence says nothing about t; each kind's table is its own counts plus KIND_PSEUDO answers per
    true label drawn from the family's table, so a kind with little evidence reads as the model does overall,
    and one with much evidence as itself. Why free: a model's errors repeat (one answer favoured, a point off on
    one kind of condition), a pattern a two-parameter kernel smears into noise. Why not its kernel for the
    pseudo-answers: a model that says 5 for every item fitted a kernel two points up, whose pseudo-answers made
    a 5 evidence against a true 1, which pulled the labels up EM round by EM round."""
    table = kernel.copy()
    members = np.flatnonzero(free)
    if len(members) == 0:
        return table
    groups, at = np.unique(family[members], return_inverse=True)
    pooled = np.zeros((len(groups), *counts.shape[1:]))
    np.add.at(pooled, at, counts[members])
    marginal = pooled.sum(axis=1, keepdims=True)  # [families, 1, y]: its answers whatever the truth
    total = marginal.sum(axis=2, keepdims=True)
    marginal = np.where(total > 0, marginal / np.maximum(total, 1e-12), 1 / len(SCALE))  # a scored model: none
    overall = pooled + thresholds.FREE_PSEUDO * marginal
    overall /= overall.sum(axis=2, keepdims=True)
    alone = np.bincount(at)[at] == 1  # a model fitted whole: its table is its family's
    shrunk = np.where(alone[:, None, None], overall[at], counts[members] + thresholds.KIND_PSEUDO * overall[at])
    table[members] = shrunk / shrunk.sum(axis=2, keepdims=True)
    return table


def density_tables(table: np.ndarray, data: Answers, groups: np.ndarray, density: np.ndarray) -> np.ndarray:
    """The workers' tables with each scored model's read from its density (score_density.tables)."""
    table = table.copy()
    read = score_density.tables(density)
    for at, family in enumerate(groups):
        table[data.family == family] = read[at]
    return table


GROWTH_STRENGTHS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)  # pseudo-answers per true label tried


def grown_tables(
    table: np.ndarray, counts: np.ndarray, kernel: np.ndarray, people: np.ndarray, strength: float
) -> np.ndarray:
    """The workers' P(y | t) with each of `people` grown from their own answers: their expected counts plus
    `strength` pseudo-answers per true label drawn from their kernel (the posterior mean of a Dirichlet centred on
    the kernel). A person with ten answers reads as their kernel (bias and noise), one with hundreds as their own
    confusion, as Dawid-Skene would: how each one uses the scale (one who never says 2, one whose 5 means
    "mostly"), which two parameters cannot say."""
    if not people.any() or not np.isfinite(strength):
        return table
    table = table.copy()
    grown = counts[people] + strength * kernel[people]
    table[people] = grown / grown.sum(axis=2, keepdims=True)
    return table


def growth_strength(counts: np.ndarray, kernel: np.ndarray) -> float:
    """The pseudo-answers per true label (GROWTH_STRENGTHS) under which the people's expected counts [people, t, y]
    are likeliest, each row a Dirichlet-multinomial around its kernel row: the data choose how far a person's own
    confusion departs from their kernel (many answers that the kernel explains choose the largest, the kernel)."""
    if len(counts) == 0:
        return np.inf
    row, centre = counts.sum(axis=2), np.maximum(kernel, 1e-12)
    scores = [
        (gammaln(a) - gammaln(a + row)).sum() + (gammaln(a * centre + counts) - gammaln(a * centre)).sum()
        for a in GROWTH_STRENGTHS
    ]
    return float(GROWTH_STRENGTHS[int(np.argmax(scores))])


def grown_people(data: Answers, strength: float) -> np.ndarray:
    """The people whose table grows from their own answers: all but those the trust plan holds (none where the
    strength is infinite, the kernel alone)."""
    held = np.zeros(len(data.workers), bool) if data.pinned is None else ~np.isnan(data.pinned)
    return ~data.free & ~held & np.isfinite(strength)
