"""Simulated language-model raters beside the simulated crowd (testing.simulate), for the tests, the
models-in-the-loop bench and its figures.

A model rater answers every item once, as `annotate rate` does: a distribution q over 1..5 (its ratings given
the condition pertinent) and P(not pertinent), stored as a row of worker `model:<name>` with `rating` the most
likely digit and `not_pertinent` P > 0.5. Five kinds:

- **strong**: less noise than a careful worker (sd 0.35 before the distribution, against 0.6), but errors that
  repeat across items, as a model's do: one point too high on one kind of condition (a hidden fifth of the
  items, the same for every crowd of a seed), and one answer favoured (near a 4 it says 4 three times in ten).
  Its q is a kernel of sd 0.6 around its answer: fairly sure, wider than a one-hot.
- **weak**: near uniform, like SmolLM2-135M on this task: q drawn around a fixed lean towards the middle, with
  no relation to the truth; P(not pertinent) near 0.4 whatever the condition.
- **confident_wrong**: sharp distributions (kernel sd 0.3 around a whole digit: 0.93 on it) at the truth plus
  one point (off by one more one time in ten), and sure flags that are right only half the time on a bad
  condition.
- **five_on_colour**: the strong model, but sure of 5 (q = 0.99) on every colour condition (the strong model's
  shifted kind).
- **constant**: sure of 5 (q = 0.99) on every item, P(not pertinent) 0.8 on every item.

The batch goes through the command's path (import_batch, routed_rounds): the items become rating tasks with a
condition of their kind (colour for the shifted fifth, the audit's other kinds for the rest), the people's
answers accepted ratings, the model's answers the table `annotate rate` writes (model_ratings.ratings_table),
read back as the import reads it (model_ratings.answers_of), and labelled by ratings.label_batch, the import's
own function; `--more` picks the next batch with followup.select from the items table the import writes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from csts_pipeline.pipeline.language_model.base import Answer
from csts_pipeline.pipeline.schemas import PROVENANCE
from csts_pipeline.stages.annotate.aggregation.em.ordinal import SCALE
from csts_pipeline.stages.annotate.labels.agreement import MODEL_WORKER, Rating, RatingArrays
from csts_pipeline.stages.annotate.steps import followup, model_ratings
from csts_pipeline.stages.annotate.steps.ratings import Labelled, label_batch
from csts_pipeline.testing.simulate import Crowd, more_ratings, simulate_crowd

MODEL_KINDS = ("strong", "weak", "confident_wrong", "five_on_colour", "constant")
HARDER_KINDS = ("correlated", "overconfident", "kind_wrong", "sure_five")
WRONG_KIND_SHARE = 0.25  # kind_wrong: the share of items of the kind of condition it gets wrong
SHIFTED_SHARE = 0.2  # strong: the share of items of the kind of condition it rates a point too high
FAVOURED, FAVOURED_P = 4, 0.3  # strong: the answer it favours, and how often it gives it when within a point
WEAK_LEAN = np.array([0.16, 0.2, 0.28, 0.2, 0.16])
SURE_FIVE = np.array([0.0025, 0.0025, 0.0025, 0.0025, 0.99])
# a condition of each kind of the audit (audit_stats.CONDITION_KINDS); the shifted fifth is colour
CONDITIONS = {
    "colour": "The colour of the main object.",
    "number": "The number of people.",
    "place": "The place where it happens.",
    "action": "The activity shown.",
    "people": "The clothing of the person.",
    "object": "The type of vehicle.",
    "time and weather": "The weather.",
}


def kernel(centre: np.ndarray, sd: float) -> np.ndarray:
    """Rows q over 1..5: a Gaussian kernel around each (real-valued) centre, normalised."""
    weights = np.exp(-((SCALE[None, :] - centre[:, None]) ** 2) / (2 * sd**2))
    return weights / weights.sum(axis=1, keepdims=True)


def condition_kind(n_items: int, seed: int) -> np.ndarray:
    """Per item: it belongs to the kind of condition the strong model rates a point too high (colour)."""
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
    if kind in ("strong", "five_on_colour"):
        answer = truth + condition_kind(n, seed) + rng.normal(0, 0.35, n)
        favoured = (np.abs(answer - FAVOURED) <= 1) & (rng.random(n) < FAVOURED_P)
        answer = np.clip(np.where(favoured, FAVOURED, answer), 1, 5)
        q = kernel(answer, 0.6)
        if kind == "five_on_colour":
            q[condition_kind(n, seed)] = SURE_FIVE
        p_flag = np.where(bad, rng.beta(8, 2, n), rng.beta(1, 12, n))
    elif kind == "constant":
        q, p_flag = np.tile(SURE_FIVE, (n, 1)), np.full(n, 0.8)
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
    return RatingArrays(np.arange(n), worker, rating, p_flag > 0.5, distribution=q, p_flag=p_flag)


def with_models(crowd: Crowd, kinds: tuple[str, ...], seed: int) -> Crowd:
    """The crowd with every model of `kinds` answering each item once (the models stay out of `crowd.kind`, so
    follow-up batches never draw them as people)."""
    parts = [crowd.ratings, *(model_rows(crowd, kind, seed) for kind in kinds)]
    return replace(crowd, ratings=RatingArrays.concat(parts))


def batch_tasks(crowd: Crowd, seed: int) -> list[dict]:
    """The crowd's items as the ratings export's tasks: pairs (high, low), a condition of each item's kind."""
    others = [kind for kind in CONDITIONS if kind != "colour"]
    drawn = np.random.default_rng(seed + 13).integers(0, len(others), crowd.n_items)
    colour = condition_kind(crowd.n_items, seed)
    return [
        {
            "item_id": f"s{seed}-{i}",
            **{name: i // 2 for name in PROVENANCE},
            "sentence1": f"A scene {i // 2}.",
            "sentence2": f"Another scene {i // 2}.",
            "condition": CONDITIONS["colour" if colour[i] else others[drawn[i]]],
            "condition_type": "high" if i % 2 == 0 else "low",
        }
        for i in range(crowd.n_items)
    ]


def people_answers(crowd: Crowd) -> list[Rating]:
    """The crowd's people's answers as the import accepts them (a flagged answer carries no rating)."""
    r = crowd.ratings.subset(crowd.ratings.human)
    return [
        Rating(int(i), str(w), "", None if f else int(v), bool(f))
        for i, w, v, f in zip(r.item, r.worker, r.rating, r.flagged)
    ]


def model_table(crowd: Crowd, tasks: list[dict], kind: str, seed: int) -> pa.Table:
    """What `annotate rate` would write for the model `kind` (model_ratings.ratings_table)."""
    q, p_flag = model_answers(crowd, kind, seed)
    answers = [
        {"rate": Answer(np.asarray(row), "logprobs", 1.0), "pertinent": Answer(np.array([1 - p, p]), "logprobs", 1.0)}
        for row, p in zip(q, p_flag)
    ]
    return model_ratings.ratings_table(tasks, answers, MODEL_WORKER + kind)


def import_batch(
    crowd: Crowd, kinds: tuple[str, ...], seed: int, tasks: list[dict] | None = None, how: str = "model"
) -> Labelled:
    """`annotate import --stage ratings --aggregate how` (model by default) on the crowd's answers and the models'
    (the import's own functions on the answers in memory)."""
    tasks = tasks or batch_tasks(crowd, seed)
    models = [a for k in kinds for a in model_ratings.answers_of(model_table(crowd, tasks, k, seed), tasks, {}).ratings]
    return label_batch(tasks, people_answers(crowd), models, how)


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
    one more human rating on each item `annotate export --more` picks (followup.select on the import's items
    table; `budget`: the human ratings all follow-ups may ask together), from the people it does not exclude."""
    grown = simulate_crowd(per_item=start, seed=seed, **shape)
    tasks = batch_tasks(grown, seed)
    spent, done = 0, 0
    for done in range(rounds):
        found = import_batch(grown, kinds, seed, tasks)
        left = None if budget is None else budget - spent
        if left is not None and left <= 0:
            break
        ids = followup.select(found.item_table(), left, lambda: pa.table({}), partial(kinds_of, found)).ids
        if len(ids) == 0:
            break
        at = {task["item_id"]: i for i, task in enumerate(tasks)}
        exclude = frozenset(followup.unreliable_people(found.workers).column("worker_id").to_pylist())
        wanted = np.array([at[i] for i in ids.tolist()], np.int64)
        grown = more_ratings(grown, wanted, 1, exclude=exclude, seed=seed * 1000 + 100 + done)
        spent += len(wanted)
    return Routed(grown, int(grown.ratings.human.sum()), done + 1)


def kinds_of(found: Labelled) -> followup.ModelKinds:
    """What `export --more` reads of the models from the import's files (followup.model_kinds), from an import
    in memory: the models' rows of its ratings table and agreement.json's model_share models."""
    rows = found.rating_table()
    share = (found.agreement.get("model_workers") or {}).get("model_share") or {}
    return rows.filter(pc.starts_with(rows.column("worker_id"), MODEL_WORKER)), share.get("models", [])
