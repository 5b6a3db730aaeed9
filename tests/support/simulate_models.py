"""Simulated language-model raters beside the simulated crowd (tests/support/simulate.py), for the tests, the
bench (bench/models_in_loop.py) and the figures of docs/annotate.md, "Models in the loop".

A model rater answers every item once, as `annotate rate` does: a distribution q over 1..5 (its ratings given
the condition pertinent) and P(not pertinent), stored as a row of worker `model:<name>` with `rating` the most
likely digit and `not_pertinent` P > 0.5. Three kinds:

- **strong**: less noise than a careful worker (sd 0.35 before the distribution, against 0.6), but errors that
  repeat across items, as a model's do: one point too high on one kind of condition (a hidden fifth of the
  items, the same for every crowd of a seed), and one answer favoured (near a 4 it says 4 three times in ten).
  Its q is a kernel of sd 0.6 around its answer: fairly sure, wider than a one-hot.
- **weak**: near uniform, like SmolLM2-135M on this task: q drawn around a fixed lean towards the middle, with
  no relation to the truth; P(not pertinent) near 0.4 whatever the condition.
- **confident_wrong**: sharp distributions (kernel sd 0.3 around a whole digit: 0.93 on it) at the truth plus
  one point (off by one more one time in ten), and sure flags that are right only half the time on a bad
  condition."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from csts_pipeline.stages.annotate.labels.agreement import MODEL_WORKER, RatingArrays
from csts_pipeline.stages.annotate.labels.ordinal import SCALE
from tests.support.simulate import Crowd, follow_up_rounds, more_ratings, simulate_crowd

MODEL_KINDS = ("strong", "weak", "confident_wrong")
HARDER_KINDS = ("correlated", "overconfident", "kind_wrong", "sure_five")
WRONG_KIND_SHARE = 0.25  # kind_wrong: the share of items of the kind of condition it gets wrong
SHIFTED_SHARE = 0.2  # strong: the share of items of the kind of condition it rates a point too high
FAVOURED, FAVOURED_P = 4, 0.3  # strong: the answer it favours, and how often it gives it when within a point
WEAK_LEAN = np.array([0.16, 0.2, 0.28, 0.2, 0.16])


def kernel(centre: np.ndarray, sd: float) -> np.ndarray:
    """Rows q over 1..5: a Gaussian kernel around each (real-valued) centre, normalised."""
    weights = np.exp(-((SCALE[None, :] - centre[:, None]) ** 2) / (2 * sd**2))
    return weights / weights.sum(axis=1, keepdims=True)


def condition_kind(n_items: int, seed: int) -> np.ndarray:
    """Per item: it belongs to the kind of condition the strong model rates a point too high."""
    return np.random.default_rng(seed + 5).random(n_items) < SHIFTED_SHARE


def kind_items(n_items: int, seed: int) -> np.ndarray:
    """Per item: it belongs to the kind of condition the kind_wrong model gets wrong (a hidden quarter)."""
    return np.random.default_rng(seed + 13).random(n_items) < WRONG_KIND_SHARE


def sure(answer: np.ndarray, mass: float = 0.99) -> np.ndarray:
    """Rows q with `mass` on each whole answer 1-5 and the rest spread evenly."""
    q = np.full((len(answer), len(SCALE)), (1 - mass) / (len(SCALE) - 1))
    q[np.arange(len(answer)), np.clip(np.rint(answer), 1, 5).astype(np.int64) - 1] = mass
    return q


def harder_answers(crowd: Crowd, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The HARDER_KINDS' answers: q [items, 5] and P(not pertinent) [items] (honest flags, as the strong model)."""
    stream = "correlated" if kind == "kind_wrong" else kind  # kind_wrong is the correlated model elsewhere
    rng = np.random.default_rng(seed * 7919 + 10 + HARDER_KINDS.index(stream))
    n = crowd.n_items
    aimed, scale = crowd.felt(np.arange(n))
    p_flag = np.where(crowd.bad, rng.beta(8, 2, n), rng.beta(1, 12, n))
    if kind == "sure_five":
        return sure(np.full(n, 5.0)), p_flag
    if kind == "overconfident":
        return sure(np.clip(aimed + rng.normal(0, 0.8, n) * scale, 1, 5)), p_flag
    q = kernel(np.clip(aimed + rng.normal(0, 0.35, n) * scale, 1, 5), 0.6)
    if kind == "kind_wrong":
        wrong = kind_items(n, seed)
        q[wrong] = sure(np.full(int(wrong.sum()), 5.0))
    return q, p_flag


def model_answers(crowd: Crowd, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One answer per item of `crowd` by the model `kind`: q [items, 5] and P(not pertinent) [items]."""
    if kind in HARDER_KINDS:
        return harder_answers(crowd, kind, seed)
    rng = np.random.default_rng(seed * 7919 + MODEL_KINDS.index(kind))
    truth, bad, n = crowd.truth.astype(np.float64), crowd.bad, crowd.n_items
    if kind == "strong":
        answer = truth + condition_kind(n, seed) + rng.normal(0, 0.35, n)
        favoured = (np.abs(answer - FAVOURED) <= 1) & (rng.random(n) < FAVOURED_P)
        answer = np.clip(np.where(favoured, FAVOURED, answer), 1, 5)
        q = kernel(answer, 0.6)
        p_flag = np.where(bad, rng.beta(8, 2, n), rng.beta(1, 12, n))
    elif kind == "weak":
        q = rng.dirichlet(WEAK_LEAN * 60, n)
        p_flag = rng.beta(8, 12, n)
    elif kind == "confident_wrong":
        q = kernel(np.clip(np.rint(truth + 1 + rng.normal(0, 0.3, n)), 1, 5), 0.3)
        sure_flag = np.where(bad, rng.random(n) < 0.5, rng.random(n) < 0.1)
        p_flag = np.where(sure_flag, 0.97, 0.03)
    else:
        raise ValueError(f"model kind must be one of {MODEL_KINDS + HARDER_KINDS} (got {kind!r})")
    return q, p_flag


def model_rows(crowd: Crowd, kind: str, seed: int) -> RatingArrays:
    """The model's rows in the ratings table's shape: worker `model:<kind>`, the most likely digit, the flag
    P > 0.5, the distribution and P(not pertinent)."""
    q, p_flag = model_answers(crowd, kind, seed)
    n = crowd.n_items
    rating = (np.argmax(q, axis=1) + 1).astype(np.float64)
    worker = np.full(n, MODEL_WORKER + kind)
    return RatingArrays(np.arange(n), worker, rating, p_flag > 0.5, q, p_flag)


def with_models(crowd: Crowd, kinds: tuple[str, ...], seed: int) -> Crowd:
    """The crowd with every model of `kinds` answering each item once (the models stay out of `crowd.kind`, so
    follow-up batches never draw them as people)."""
    parts = [crowd.ratings, *(model_rows(crowd, kind, seed) for kind in kinds)]
    return replace(crowd, ratings=RatingArrays.concat(parts))


@dataclass
class Routed:
    """A crowd grown by routed follow-up rounds, and the human ratings it bought."""

    crowd: Crowd
    human_ratings: int
    rounds: int


def routed_rounds(
    start: int, rounds: int, seed: int, kinds: tuple[str, ...] = (), budget: int | None = None, **shape
) -> Routed:
    """People give `start` ratings an item, the models of `kinds` answer every item, then up to `rounds` batches of
    one more human rating on each item `annotate export --more` routes to (followup.route, with `budget`), from
    the people it does not exclude. Without models this is simulate.follow_up_rounds."""
    from csts_pipeline.stages.annotate.labels import quality
    from csts_pipeline.stages.annotate.steps import followup

    if not kinds and budget is None:
        grown = follow_up_rounds(start, rounds, seed, **shape)
        return Routed(grown, int(grown.ratings.human.sum()), rounds)
    grown = with_models(simulate_crowd(per_item=start, seed=seed, **shape), kinds, seed)
    done = 0
    for done in range(rounds):
        r = grown.ratings
        fit = quality.anchored_fit(r, grown.n_items, None)
        people = r.subset(r.human)
        rated = np.bincount(people.item[people.rated], minlength=grown.n_items) > 0
        distribution = np.where(rated[:, None], fit.posterior, np.nan)
        answers = np.bincount(people.item, minlength=grown.n_items)
        gap = quality.model_gap(fit, r, grown.n_items)
        wanted = followup.route(distribution, answers, np.full(grown.n_items, "kept"), budget, gap)
        if len(wanted) == 0:
            break
        human = ~np.char.startswith(fit.workers.astype(str), MODEL_WORKER)
        exclude = frozenset(fit.workers[human & (fit.reliability < quality.UNRELIABLE_BELOW)].tolist())
        grown = more_ratings(grown, wanted, 1, exclude=exclude, seed=seed * 1000 + 100 + done)
    return Routed(grown, int(grown.ratings.human.sum()), done + 1)
