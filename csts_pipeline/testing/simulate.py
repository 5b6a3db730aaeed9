"""Simulated crowds with a known truth, for the tests, the bench scripts and the docs' figures.

Items come in pairs, a high condition then a low one, each with an integer true label on 1-5 (high: mostly 4-5,
low: mostly 1-2; some pairs close) and, on a share of the items, a condition that is not pertinent. Workers are
of four kinds: careful (the truth plus Gaussian noise, rounded), lenient and harsh (the same, shifted by +1 or -1
point, clipped to the scale) and spammers (uniform 1-5, flags at random). Every item is rated by `per_item`
distinct workers drawn at random.

Harder crowds (issue 46): `ambiguity` gives each item a shared shift (Gaussian, that sd) that every rater of the
item feels, people and the simulated models alike (simulate_models.py), so their errors are correlated and more
ratings do not average it away; `difficulty` gives each item a factor on everyone's noise (log-normal, that
log-sd). Both are drawn from their own stream, so a crowd without them is the crowd it always was."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from csts_pipeline.stages.annotate.labels.agreement import RatingArrays

KINDS = ("careful", "lenient", "harsh", "spammer")
SHIFT = {"careful": 0, "lenient": 1, "harsh": -1, "spammer": 0}
HIGH_TRUTH = (0.0, 0.0, 0.2, 0.4, 0.4)  # P(true label = 1..5) of a high condition
LOW_TRUTH = (0.4, 0.4, 0.2, 0.0, 0.0)


@dataclass
class Crowd:
    """A simulated crowd's answers (`ratings`, with flagged answers' rating 0) and what produced them."""

    ratings: RatingArrays
    truth: np.ndarray  # per item, integer 1-5
    bad: np.ndarray  # per item: the condition is not pertinent
    kind: dict[str, str]  # worker id -> kind
    shift: np.ndarray | None = None  # per item, the shared ambiguity every rater feels (None: none)
    scale: np.ndarray | None = None  # per item, the factor on everyone's noise (None: 1)

    def felt(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The truth raters aim at (the truth plus the shared shift) and the noise factor, for `items`."""
        shift = np.zeros(len(items)) if self.shift is None else self.shift[items]
        scale = np.ones(len(items)) if self.scale is None else self.scale[items]
        return self.truth[items] + shift, scale

    @property
    def n_items(self) -> int:
        return len(self.truth)

    def workers_of(self, kind: str) -> list[str]:
        return [w for w, k in self.kind.items() if k == kind]


def crowd_workers(n_workers: int, spam: float, lenient: float, harsh: float) -> dict[str, str]:
    """Worker ids W000... with their kinds: the shares rounded to whole workers, the rest careful."""
    shares = {"spammer": spam, "lenient": lenient, "harsh": harsh}
    counts = {kind: round(share * n_workers) for kind, share in shares.items()}
    kinds = [kind for kind, n in counts.items() for _ in range(n)]
    kinds += ["careful"] * (n_workers - len(kinds))
    return {f"W{j:03d}": kind for j, kind in enumerate(kinds)}


def truth_labels(n_pairs: int, rng: np.random.Generator) -> np.ndarray:
    """2 x n_pairs integer labels, high then low for each pair."""
    high = rng.choice(np.arange(1, 6), n_pairs, p=HIGH_TRUTH)
    low = rng.choice(np.arange(1, 6), n_pairs, p=LOW_TRUTH)
    return np.stack([high, low], axis=1).reshape(-1)


def answer(
    truth: np.ndarray, kinds: np.ndarray, noise: float, rng: np.random.Generator, scale: np.ndarray | None = None
) -> np.ndarray:
    """One rating per (item truth, worker kind): shifted, noisy (times the item's `scale`) and rounded, or
    uniform for a spammer."""
    shift = np.array([SHIFT[k] for k in kinds])
    error = rng.normal(0, noise, len(truth)) * (1.0 if scale is None else scale)
    honest = np.clip(np.rint(truth + shift + error), 1, 5)
    return np.where(kinds == "spammer", rng.integers(1, 6, len(truth)), honest).astype(np.float64)


def flags(bad: np.ndarray, kinds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Honest workers flag a bad condition with probability 0.85 and a good one with 0.04; spammers 0.3 either way."""
    p = np.where(kinds == "spammer", 0.3, np.where(bad, 0.85, 0.04))
    return rng.random(len(bad)) < p


def simulate_crowd(
    n_items: int = 400,
    per_item: int = 3,
    n_workers: int = 20,
    spam: float = 0.25,
    lenient: float = 0.15,
    harsh: float = 0.15,
    noise: float = 0.6,
    bad_share: float = 0.1,
    seed: int = 0,
    ambiguity: float = 0.0,
    difficulty: float = 0.0,
) -> Crowd:
    """A crowd of `n_workers` (shares of spammers, lenient and harsh workers; careful the rest) rating `n_items`
    items (an even number: pairs), `per_item` distinct workers each; `ambiguity` and `difficulty`: the harder
    shapes (module docstring)."""
    rng = np.random.default_rng(seed)
    kind = crowd_workers(n_workers, spam, lenient, harsh)
    names = np.array(list(kind))
    truth = truth_labels(n_items // 2, rng)
    bad = rng.random(len(truth)) < bad_share
    chosen = np.argsort(rng.random((len(truth), n_workers)), axis=1)[:, :per_item]  # distinct workers per item
    item = np.repeat(np.arange(len(truth)), per_item)
    worker = names[chosen.reshape(-1)]
    kinds = np.array([kind[w] for w in worker])
    crowd = Crowd(RatingArrays(item, worker, np.zeros(len(item)), np.zeros(len(item), bool)), truth, bad, kind)
    if ambiguity or difficulty:
        harder = np.random.default_rng(seed + 97)
        crowd.shift = harder.normal(0, ambiguity, len(truth))
        crowd.scale = np.exp(harder.normal(0, difficulty, len(truth)))
    aimed, scale = crowd.felt(item)
    rating = answer(aimed, kinds, noise, rng, scale)
    flagged = flags(bad[item], kinds, rng)
    rating[flagged] = 0
    crowd.ratings = RatingArrays(item, worker, rating, flagged)
    return crowd


def more_ratings(
    crowd: Crowd,
    items: np.ndarray,
    extra: int,
    exclude: frozenset[str] = frozenset(),
    noise: float = 0.6,
    seed: int = 1,
) -> Crowd:
    """The crowd with `extra` more answers on each of `items`, by workers who have not rated the item yet and are
    not in `exclude` (a follow-up batch closed to the workers found unreliable); same kinds and answer model."""
    rng = np.random.default_rng(seed)
    names = np.array([w for w in crowd.kind if w not in exclude])
    given = {(int(i), str(w)) for i, w in zip(crowd.ratings.item, crowd.ratings.worker)}
    new_item, new_worker = [], []
    for i in items:
        free = [w for w in names[rng.permutation(len(names))] if (int(i), str(w)) not in given]
        for w in free[:extra]:
            new_item.append(int(i))
            new_worker.append(str(w))
    item, worker = np.array(new_item, np.int64), np.array(new_worker)
    kinds = np.array([crowd.kind[w] for w in worker])
    aimed, scale = crowd.felt(item)
    rating = answer(aimed, kinds, noise, rng, scale)
    flagged = flags(crowd.bad[item], kinds, rng)
    rating[flagged] = 0
    merged = RatingArrays.concat([crowd.ratings, RatingArrays(item, worker, rating, flagged)])
    return replace(crowd, ratings=merged)


def follow_up_rounds(start: int, rounds: int, seed: int, **crowd: Any) -> Crowd:
    """A crowd that first gives `start` ratings per item, then up to `rounds` follow-up batches of one more
    rating on each item `annotate export --more` would choose (followup.needs_more), from the workers it does
    not exclude (reliability below thresholds.UNRELIABLE_BELOW)."""
    from csts_pipeline.stages.annotate.aggregation import thresholds
    from csts_pipeline.stages.annotate.aggregation.em import ordinal
    from csts_pipeline.stages.annotate.steps import followup

    grown = simulate_crowd(per_item=start, seed=seed, **crowd)
    for round_ in range(rounds):
        r = grown.ratings
        fit = ordinal.fit(r.item[r.rated], r.worker[r.rated], r.rating[r.rated], grown.n_items)
        rated = np.bincount(r.item[r.rated], minlength=grown.n_items) > 0
        distribution = np.where(rated[:, None], fit.posterior, np.nan)
        answers = np.bincount(r.item, minlength=grown.n_items)
        standing = followup.Standing(distribution, answers, np.full(grown.n_items, "kept"))
        wanted = np.flatnonzero(followup.needs_more(standing))
        if len(wanted) == 0:
            break
        exclude = frozenset(fit.workers[fit.reliability < thresholds.UNRELIABLE_BELOW].tolist())
        grown = more_ratings(grown, wanted, 1, exclude=exclude, seed=seed * 1000 + 100 + round_)
    return grown


GOLD_ANSWERS = ("5", "5", "1", "3", "not_pertinent")  # drawn in turn for the controls of gold_crowd


@dataclass
class GoldCrowd:
    """A simulated batch with hidden controls: `crowd` over real and control items, and per item its gold answer
    (None for a real item), as tasks.jsonl holds it."""

    crowd: Crowd
    gold_answer: list[str | None]


def gold_crowd(n_items: int = 2000, share: float = 0.05, per_item: int = 3, seed: int = 0, **kinds: Any) -> GoldCrowd:
    """`n_items` real items and as many controls as `annotate export --gold-share share` adds, shuffled, rated by
    the same workers with the same answer model: a numeric control has that true label, a not-pertinent one is a
    bad condition (honest workers flag it with probability 0.85)."""
    from csts_pipeline.stages.annotate.crowd.hidden_gold import gold_count

    crowd = simulate_crowd(n_items=n_items + 2 * gold_count(n_items, share), per_item=per_item, seed=seed, **kinds)
    rng = np.random.default_rng(seed + 7)
    n_gold = gold_count(n_items, share)
    is_gold = np.zeros(crowd.n_items, bool)
    is_gold[rng.choice(crowd.n_items, n_gold, replace=False)] = True
    answers: list[str | None] = [None] * crowd.n_items
    for turn, i in enumerate(np.flatnonzero(is_gold)):
        answers[i] = GOLD_ANSWERS[turn % len(GOLD_ANSWERS)]
    keep = np.flatnonzero(~is_gold)[:n_items]  # drop the surplus real items so that n_items stay
    kept = np.sort(np.concatenate([keep, np.flatnonzero(is_gold)]))
    return _answer_controls(crowd, kept, [answers[i] for i in kept], seed)


def _answer_controls(crowd: Crowd, kept: np.ndarray, answers: list[str | None], seed: int) -> GoldCrowd:
    """The crowd restricted to the `kept` items (renumbered), its answers to the controls redrawn from their gold."""
    rng = np.random.default_rng(seed + 11)
    new_index = np.full(crowd.n_items, -1)
    new_index[kept] = np.arange(len(kept))
    r = crowd.ratings
    on = new_index[r.item] >= 0
    item, worker = new_index[r.item[on]], r.worker[on]
    truth, bad = crowd.truth[kept].copy(), crowd.bad[kept].copy()
    for i, gold in enumerate(answers):
        if gold is not None:
            bad[i] = gold == "not_pertinent"
            truth[i] = int(rng.integers(1, 6)) if bad[i] else int(gold)
    kinds = np.array([crowd.kind[w] for w in worker])
    rating = answer(truth[item], kinds, 0.6, rng)
    flagged = flags(bad[item], kinds, rng)
    rating[flagged] = 0
    ratings = RatingArrays(item, worker, rating, flagged)
    return GoldCrowd(Crowd(ratings, truth, bad, crowd.kind), answers)


def gold_decisions(seeds: range, **batch: Any) -> tuple[dict[str, list[str]], list[float], list[int]]:
    """The hidden-gold test's decision on every worker of simulated batches (gold_crowd with `batch`), by kind of
    worker; the control share of each batch; every worker's number of gold answers."""
    from csts_pipeline.stages.annotate.crowd.hidden_gold import GoldCheck
    from csts_pipeline.stages.annotate.crowd.screening import Rating

    decisions: dict[str, list[str]] = {}
    shares, answers = [], []
    for seed in seeds:
        made = gold_crowd(seed=seed, **batch)
        r = made.crowd.ratings
        accepted = [
            Rating(int(i), str(w), "", None if f else int(v), bool(f))
            for i, w, v, f in zip(r.item, r.worker, r.rating, r.flagged)
        ]
        check = GoldCheck.of([{"gold_answer": a} for a in made.gold_answer], accepted)
        shares.append(float(np.mean([a is not None for a in made.gold_answer])))
        for worker, kind in made.crowd.kind.items():
            found = check.workers.get(worker)
            decisions.setdefault(kind, []).append(found.decision if found else "undecided")
            answers.append(found.answers if found else 0)
    return decisions, shares, answers
