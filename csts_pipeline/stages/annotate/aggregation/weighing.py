"""The rater model fitted as the batch's evidence says (aggregation/trust.py): each worker held or fitted by what
measures it, the gold's and the expert sample's labels fixed (trust from evidence)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from csts_pipeline.stages.annotate.aggregation import model_workers, thresholds, trust
from csts_pipeline.stages.annotate.aggregation.em import em_answers, kernel, ordinal
from csts_pipeline.stages.annotate.labels.agreement import RatingArrays

Anchor = tuple[RatingArrays, np.ndarray]  # ratings of gold items (indexed 0..) and their true labels
Controls = tuple[RatingArrays, np.ndarray]  # ratings of every scored control (indexed 0..), 1 where not pertinent


@dataclass(frozen=True)
class Evidence:
    """What the batch holds beside the answers, for the rater model: `anchor` the hidden gold's ratings and true
    labels; `known` per item the expert sample's label as given, decimals kept (0: none); `test` the people's
    answers on the qualification test's rating items with their gold; `kinds` per item, then per gold item, its
    condition's kind (a language model is fitted per kind); `controls` the scored hidden controls, numeric and not
    pertinent (a language model's flags)."""

    anchor: Anchor | None = None
    known: np.ndarray | None = None
    test: Anchor | None = None
    kinds: np.ndarray | None = None
    controls: Controls | None = None


def anchored_fit(
    ratings: RatingArrays,
    n_items: int,
    anchor: Anchor | None,
    *,
    ambiguity: float | None = None,
    known: np.ndarray | None = None,
    people_noise: float | dict[str, float] | None = None,
    label_prior: np.ndarray | None = None,
    density_on_known: bool = False,
    max_iter: int = thresholds.MAX_ITER,
    tol: float = thresholds.TOL,
) -> ordinal.OrdinalFit:
    """The ordinal model on the items' ratings, with the gold items' ratings appended after them and their
    known labels fixed (ordinal.fit's `known`), as are the items of `known` (the expert sample, per item 0 or a
    label); the posterior returned is the items' only. `ambiguity`: the shared shift's sd as the user set it
    (None: chosen from the people's answers, aggregation/em/shift.py); `people_noise`: held for every person
    (trust.py)."""
    rated = ratings.subset(ratings.rated)
    mine = np.zeros(n_items) if known is None else known
    if anchor is None:
        both, all_known, total = rated, (None if known is None else mine), n_items
    else:
        gold, truth = anchor
        shifted = gold.subset(gold.rated)
        shifted = replace(shifted, item=shifted.item + n_items)  # a model's distributions on gold stay with it
        both, all_known, total = (
            RatingArrays.concat([rated, shifted]),
            np.concatenate([mine, truth]),
            n_items + len(truth),
        )
    fit = ordinal.fit(both.item, both.worker, both.rating, total, known=all_known, soft=both.distribution,
                      ambiguity=ambiguity, people_noise=people_noise, score=both.score, label_prior=label_prior,
                      density_on_known=density_on_known, max_iter=max_iter, tol=tol)  # fmt: skip
    joint = None if fit.joint is None else fit.joint[:n_items]
    return replace(fit, posterior=fit.posterior[:n_items], joint=joint)


def weighed_fit(
    plan: trust.TrustPlan,
    split: RatingArrays,
    n_items: int,
    *,
    gold: Anchor | None,
    ambiguity: float | None,
    known: np.ndarray | None,
    test: Anchor | None = None,
) -> ordinal.OrdinalFit:
    """The rater model with the people held where the plan says (trust.py): free where repeats measure them, or
    where no model answers and the known labels all sit in the fit (there they measure each person; one pooled
    noise held for all cost the labels' order: USTS-C, one rating an item, 0.786 against 0.792); at
    the noise the items of known label measure (the expert sample and the gold, fixed in the fit; the
    qualification test's answers `test`, which measure the noise and stay out of the fit); at the triad rule's
    reliability; at the reliability a sparse sample of repeats measures, beside a model (pooled_people); or, with
    one informative model, at the noise where they come out as reliable as the models (trust.equal_noise)."""
    useful = [name for name, m in plan.models.items() if m.informative]
    in_fit = plan.mode == trust.KNOWN and not plan.pooled  # no model, every known label in the fit
    free = plan.mode == trust.REPEATS and not plan.pooled
    if free or in_fit or (plan.mode == trust.ASSUMED and not useful):
        return anchored_fit(split, n_items, gold, ambiguity=ambiguity, known=known)
    if plan.pooled:
        noise, pooled = pooled_people(plan, split, n_items, [a for a in (gold, test) if a is not None], known)
        plan.people_reliability = pooled  # what the evidence measured, said per person and in agreement.json
        noises = trust.people_noises(plan, pooled) if plan.relative else noise
        prior = sample_prior(known)
        return anchored_fit(split, n_items, gold, ambiguity=ambiguity, known=known, people_noise=noises,
                            label_prior=prior, density_on_known=plan.known_in_batch)  # fmt: skip
    if plan.people_reliability is not None:
        noises = trust.people_noises(plan, plan.people_reliability)
        return anchored_fit(split, n_items, gold, ambiguity=ambiguity, known=known, people_noise=noises)
    first = anchored_fit(split, n_items, gold, ambiguity=ambiguity, known=known)

    def at(noises: dict[str, float], tol: float = thresholds.SEARCH_TOL) -> ordinal.OrdinalFit:
        return anchored_fit(split, n_items, gold, ambiguity=first.ambiguity, known=known, people_noise=noises,
                            max_iter=thresholds.EQUAL_MAX_ITER, tol=tol)  # fmt: skip

    fit = at(trust.equal_noise(at, plan, useful), thresholds.TOL)
    people = ~np.isin(model_workers.model_name(fit.workers), useful)
    plan.people_reliability = float(np.mean(fit.reliability[people]))
    return replace(fit, spread_log_likelihoods=first.spread_log_likelihoods, spread_on_known=first.spread_on_known)


def sample_prior(known: np.ndarray | None) -> np.ndarray | None:
    """The label prior the expert sample measures (a random sample of the batch, unlike the gold, which is
    chosen): its labels' shares with one pseudo-item per label; None under thresholds.MIN_EVIDENCE items."""
    if known is None or (known > 0).sum() < thresholds.MIN_EVIDENCE:
        return None
    counts = np.bincount(em_answers.rounded(known[known > 0]), minlength=len(ordinal.SCALE) + 1)[1:] + 1.0
    return counts / counts.sum()


def pooled_people(
    plan: trust.TrustPlan, split: RatingArrays, n_items: int, anchors: list[Anchor], known: np.ndarray | None
) -> tuple[float, float]:
    """The people's one noise and its reliability: measured on the items of known label (KNOWN), else on the
    items two or more of them rated (a sparse sample of repeats beside a model)."""
    if plan.mode == trust.KNOWN:
        noise = known_noise(split, n_items, anchors, known)
        return noise, float(kernel.reliability(kernel.response(np.zeros(1), np.array([noise])))[0])
    reliability = repeat_reliability(split)
    return kernel.pinned_noise(reliability), reliability


def repeat_reliability(split: RatingArrays) -> float:
    """The people's reliability as the items two or more of them rated measure it, pooled over people: the square
    root of their answers' agreement there (Spearman over every ordered pair of two answers to one item), the
    scale the triad rule pins people on. Why not the EM on those items: a hundred items' latent labels absorb
    part of the noise, and the people came out too reliable beside the model (STS-B, one person an item, a
    100-item sample rated three times, MiniLM: labels 0.722 on one seed, 0.789 from the agreement;
    bench.annotate.trust_evidence)."""
    people = split.subset(split.human & split.rated)
    order = np.argsort(people.item, kind="stable")
    item, rating = people.item[order], people.rating[order].astype(np.float64)
    first, second = [], []
    for step in range(1, int(np.bincount(item).max())):
        same = item[:-step] == item[step:]
        first += [rating[:-step][same], rating[step:][same]]
        second += [rating[step:][same], rating[:-step][same]]
    between = trust.spearman(np.concatenate(first), np.concatenate(second)) if first else 0.0
    return float(np.clip(np.sqrt(max(between, 0.0)), 0.05, 0.99))


def known_noise(split: RatingArrays, n_items: int, anchors: list[Anchor], known: np.ndarray | None) -> float:
    """The people's noise as their ratings on the items of known label measure it (the batch's expert sample,
    then each of `anchors`: the gold, the qualification test's rating items), pooled over people (a few known
    items each cannot tell one person's from another's)."""
    people = split.subset(split.human & split.rated)
    truth = np.zeros(n_items) if known is None else known
    on = truth[people.item] > 0
    item, rating = people.item[on], people.rating[on]
    for ratings, labels in anchors:
        theirs = ratings.subset(ratings.human & ratings.rated)
        item = np.concatenate([item, theirs.item + len(truth)])
        rating = np.concatenate([rating, theirs.rating])
        truth = np.concatenate([truth, labels])
    fit = ordinal.fit(item, np.full(len(item), "people"), rating, len(truth), known=truth, ambiguity=0.0)
    return float(fit.noise[0])
