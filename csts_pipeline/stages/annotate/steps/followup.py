"""`annotate export --stage ratings --more`: a follow-up batch for the items whose label is still uncertain, so a
requester pays for a third or fourth rating only where it can change something.

An item needs more ratings when it is kept (or has too few ratings, or none) and has fewer than MAX_ANSWERS
answers, and, with `--aggregate model`, the standard deviation of its posterior over 1-5 is above MORE_ABOVE_SD;
with the other policies, when its raters disagree (their ratings span DISAGREE_SPAN points or more) or it has
fewer than two ratings. The batch is closed to the workers the model found unreliable (`exclude_workers.csv`, for
a qualification or block list on the platform). Its items keep their ids, so the next import takes the first
batch's results and the follow-up's together (`--results first.csv --results more.csv`) and merges them.

With a language model among the raters (worker `model:<name>`) its answers are in the posterior routed by (but
not on its weak kinds of condition, where the import left them out: there the posterior is the people's), and
however narrow its posterior an item is asked again where the models' answers make the people's label ten times
less likely than their own favourite (`model_log10_ratio` above RATIO_ABOVE), or where a model answered it on a
kind of condition that is weak for it or where its mean error is KIND_ERROR_AT points or more, until people have
rated it KIND_MIN_RATINGS times (aggregation/thresholds.py); only people's answers count towards MAX_ANSWERS. Each
item's reason is written beside the batch (REASONS_FILE) and counted in its record. `--budget N` caps the human ratings
all follow-up batches ask together (spent)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import read_record
from csts_pipeline.pipeline.shards import read_table
from csts_pipeline.stages.annotate.aggregation import model_workers, thresholds
from csts_pipeline.stages.annotate.aggregation.em.ordinal import SCALE
from csts_pipeline.stages.annotate.crowd import tasks
from csts_pipeline.stages.annotate.crowd.files import read_jsonl, write_csv
from csts_pipeline.stages.annotate.labels.agreement import MODEL_WORKER
from csts_pipeline.stages.annotate.layout import (
    AGREEMENT,
    INDIVIDUAL_RATINGS,
    ITEMS,
    RATINGS,
    RATINGS_TASKS,
    TASKS,
    WORKERS,
    require_current_ratings,
)
from csts_pipeline.stages.annotate.steps.options import FollowupExportOptions

log = logging.getLogger(__name__)
RATINGS_MORE = "ratings_more"
EXCLUDE = "exclude_workers.csv"
REASONS_FILE = "reasons.csv"  # ratings_more/: each item of the batch and why it was asked (never uploaded)
MORE_ABOVE_SD = 0.5
RATIO_ABOVE = 1.0  # log10: the models' answers make the people's label 10 times less likely: ask people
KIND_ERROR_AT = thresholds.KIND_ERROR_AT  # a model's mean error on a kind from which its items go to people
KIND_MIN_RATINGS = thresholds.KIND_MIN_RATINGS  # people's ratings such an item is asked up to
DISAGREE_SPAN = 2
MAX_ANSWERS = 8
OPEN = ("kept", "too_few_ratings", "unanswered")
# why an item is asked again, most needed first (route's order); the first that holds is the item's reason
REASONS = ("unrated", "models_disagree", "model_kind_error", "wide_posterior")
REASON_WORDS = {
    "unrated": "without a human rating",
    "models_disagree": "where a model contradicts the people",
    "model_kind_error": f"of a kind of condition a model errs on (weak, or mean error {thresholds.KIND_ERROR_AT}+)",
    "wide_posterior": f"with a posterior sd above {MORE_ABOVE_SD}",
    "disagreement": "with too few ratings or ratings far apart",
}


def posterior_sd(distribution: np.ndarray) -> np.ndarray:
    """Standard deviation of each posterior row over 1..5 (nan rows stay nan)."""
    mean = distribution @ SCALE
    return np.sqrt(np.maximum(distribution @ SCALE**2 - mean**2, 0.0))


class Standing(NamedTuple):
    """Model labels: what the import says of each item, as routing reads it. `distribution`: the posterior over
    1-5 (rows of nan: no person rated it); `answers`: people's answers; `status`: the item's status; `log10_ratio`
    (quality.model_log10_ratio; nan: no model): how much less likely the models' answers make the people's label
    than their favourite; `kind_doubt` (kind_doubt): a model is doubtful on the item's kind of condition and
    people have rated it fewer than thresholds.KIND_MIN_RATINGS times."""

    distribution: np.ndarray
    answers: np.ndarray
    status: np.ndarray
    log10_ratio: np.ndarray | None = None
    kind_doubt: np.ndarray | None = None


def reasons(items: Standing) -> np.ndarray:
    """Per item, why it needs more ratings, the first of REASONS that holds ("" where none does), for items open
    for ratings under the answer cap: no posterior, the models' answers make the people's label more than
    10**RATIO_ABOVE times less likely than their favourite, a model is doubtful on the item's kind of condition,
    or a posterior sd above MORE_ABOVE_SD."""
    sd = posterior_sd(np.nan_to_num(items.distribution, nan=0.0))
    unrated = np.isnan(items.distribution).any(axis=1)
    none = np.zeros(len(sd), bool)
    apart = none if items.log10_ratio is None else np.nan_to_num(items.log10_ratio, nan=0.0) > RATIO_ABOVE
    doubt = none if items.kind_doubt is None else items.kind_doubt
    why = np.select([unrated, apart, doubt, sd > MORE_ABOVE_SD], REASONS, default="")
    return np.where(np.isin(items.status, OPEN) & (items.answers < MAX_ANSWERS), why, "")


def needs_more(items: Standing) -> np.ndarray:
    """Per item, it needs more ratings (reasons gives one)."""
    return reasons(items) != ""


def route(items: Standing, budget: int | None = None) -> np.ndarray:
    """The items of the next batch, most needed first: those `reasons` picks, in the order of REASONS (the ones
    without a human rating first, then those where the models and the people disagree, then those of a kind
    of condition a model is doubtful on), each reason's items by posterior sd, widest first (a model's answers
    are in the posterior: where people and the model agree tightly it is narrow, where the model is unsure it
    is wide); with `budget`, only the first `budget` of them (one human rating each)."""
    why = reasons(items)
    chosen = np.flatnonzero(why != "")
    sd = posterior_sd(np.nan_to_num(items.distribution[chosen], nan=0.0))
    rank = np.array([REASONS.index(reason) for reason in why[chosen]], np.int64)
    ordered = chosen[np.lexsort((-sd, rank))]
    return ordered if budget is None else ordered[:budget]


def doubtful_kinds(models: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The (model, kind of condition) pairs a model's answers cannot settle (model_workers.doubtful: weak, or a
    mean error of thresholds.KIND_ERROR_AT points or more either way), from agreement.json's model_share models; a model
    left out whole is in no pair: it changed no label, so routing is the people's alone there."""
    return {
        (m["worker_id"], k["kind"])
        for m in models
        if not m.get("left_out")
        for k in m.get("kinds") or []
        if model_workers.doubtful(k)
    }


def kind_doubt(items: pa.Table, model_rows: pa.Table, models: list[dict[str, Any]]) -> np.ndarray:
    """Per item of the import's items table: a model answered it (`model_rows`: the models' rows of its ratings
    table) on a kind of condition it is doubtful on (doubtful_kinds), and people have rated it fewer than
    thresholds.KIND_MIN_RATINGS times. Why: a model's errors on a kind repeat from item to item, and its table there is
    learned from the people's answers on that kind; the posterior takes its errors as independent and so can be
    narrow where it rests on that kind's table, so its width does not show the doubt."""
    doubtful = doubtful_kinds(models)
    n = items.num_rows
    if not doubtful or model_rows.num_rows == 0:
        return np.zeros(n, bool)
    kinds = model_workers.condition_kinds(items.column("condition").to_pylist())
    at = pc.index_in(model_rows.column("item_id"), items.column("item_id")).to_pylist()
    workers = model_rows.column("worker_id").to_pylist()
    hit = [i for i, w in zip(at, workers) if i is not None and (w, kinds[i]) in doubtful]
    answered = np.bincount(np.array(hit, np.int64), minlength=n) > 0
    return answered & (items.column("ratings").to_numpy() < thresholds.KIND_MIN_RATINGS)


def disagreeing(item: np.ndarray, rating: np.ndarray, answers: np.ndarray, status: np.ndarray) -> np.ndarray:
    """Other policies: items open for ratings, under the cap, with fewer than two ratings or a span of
    DISAGREE_SPAN points or more among them (`item`, `rating`: the 1-5 ratings)."""
    n = len(status)
    count = np.bincount(item, minlength=n)
    high = np.full(n, -np.inf)
    low = np.full(n, np.inf)
    np.maximum.at(high, item, rating)
    np.minimum.at(low, item, rating)
    wide = (count >= 2) & (high - low >= DISAGREE_SPAN)
    return np.isin(status, OPEN) & (answers < MAX_ANSWERS) & ((count < 2) | wide)


def human_ratings(ratings_dir: Path) -> pa.Table:
    """`ratings.parquet` without the model workers' rows (a table written before the model columns reads too)."""
    ratings = read_table(ratings_dir / INDIVIDUAL_RATINGS)
    return ratings.filter(pc.invert(pc.starts_with(ratings.column("worker_id"), MODEL_WORKER)))


class Selection(NamedTuple):
    """The item ids of the next batch, most needed first, the rule used, and each item's reason (REASONS)."""

    ids: np.ndarray
    rule: str
    reasons: np.ndarray


ModelKinds = tuple[pa.Table, list[dict[str, Any]]]  # the models' rows of ratings.parquet, model_share's models


def _selection(ratings_dir: Path, budget: int | None) -> Selection:
    """The items that need more ratings, from what the import wrote."""
    items = read_table(ratings_dir / ITEMS)
    return select(items, budget, lambda: human_ratings(ratings_dir), lambda: model_kinds(ratings_dir))


def model_kinds(ratings_dir: Path) -> ModelKinds:
    """The models' rows of `ratings.parquet` and their fits per kind of condition from `agreement.json`
    (model_workers.model_share), as the import wrote them: nothing is refitted."""
    ratings = read_table(ratings_dir / INDIVIDUAL_RATINGS)
    rows = ratings.filter(pc.starts_with(ratings.column("worker_id"), MODEL_WORKER))
    agreement = json.loads((ratings_dir / AGREEMENT).read_text(encoding="utf-8"))
    share = (agreement.get("model_workers") or {}).get("model_share") or {}
    return rows, share.get("models", [])


def select(
    items: pa.Table,
    budget: int | None,
    people: Callable[[], pa.Table],
    models: Callable[[], ModelKinds] | None = None,
) -> Selection:
    """From the import's items table (and, for the policies without the rater model, `people`: the people's rows
    of its ratings table; for the rater model, `models`: the language models' rows and fits per kind, for
    kind_doubt), the next batch, most needed first."""
    ids = items.column("item_id").to_numpy(zero_copy_only=False)
    status = items.column("status").to_numpy(zero_copy_only=False)
    answers = items.column("answers").to_numpy()  # people's answers (model workers are not counted there)
    distribution = items.column("distribution")
    if distribution.null_count < items.num_rows:
        rows = np.array([[np.nan] * len(SCALE) if d is None else d for d in distribution.to_pylist()])
        ratio = None
        if "model_log10_ratio" in items.column_names:  # items written before the column have none
            ratio = np.array([np.nan if g is None else g for g in items.column("model_log10_ratio").to_pylist()])
        doubt = None if models is None else kind_doubt(items, *models())
        standing = Standing(rows, answers, status, ratio, doubt)
        chosen = route(standing, budget)
        return Selection(ids[chosen], "model", reasons(standing)[chosen])
    ratings = people().filter(pc.invert(pc.field("not_pertinent")))
    index = pc.index_in(ratings.column("item_id"), items.column("item_id")).to_numpy(zero_copy_only=False)
    values = ratings.column("rating").to_numpy(zero_copy_only=False).astype(np.float64)
    chosen = np.flatnonzero(disagreeing(index.astype(np.int64), values, answers, status))
    chosen = chosen if budget is None else chosen[:budget]
    return Selection(ids[chosen], "disagreement", np.full(len(chosen), "disagreement"))


def excluded_workers(ratings_dir: Path) -> pa.Table:
    """The workers the model found unreliable, with their reliability (empty without the model)."""
    return unreliable_people(read_table(ratings_dir / WORKERS))


def unreliable_people(workers: pa.Table) -> pa.Table:
    """The people of a workers table marked unreliable (a follow-up batch is closed to them)."""
    people = pc.invert(pc.starts_with(workers.column("worker_id"), MODEL_WORKER))  # a model takes no HITs
    unreliable = workers.filter(pc.and_(workers.column("unreliable"), people))
    return unreliable.select(["worker_id", "reliability", "ratings"])


def export_more(
    annotate_dir: Path, options: FollowupExportOptions = FollowupExportOptions(), *, force: bool = False
) -> dict[str, Any]:
    """Write `ratings_more/`: hits.csv and tasks.jsonl for the items that need more ratings (the most needed
    first; with `budget`, as many as the budget has left after the earlier follow-ups, spent_before),
    exclude_workers.csv, and reasons.csv with each item's reason (counted by reason in the record)."""
    budget = options.budget
    if budget is not None and budget < 1:
        raise UserError(f"--budget must be at least 1 (got {budget})")
    ratings_dir = annotate_dir / RATINGS
    upstream = require_current_ratings(annotate_dir)
    spent = spent_before(annotate_dir / RATINGS_MORE, upstream["fingerprint"])
    if budget is not None and spent >= budget:
        raise UserError(
            f"{annotate_dir / RATINGS_MORE}: --budget {budget} is spent: the follow-up batches so far asked "
            f"{spent} human ratings; nothing was written"
        )
    params = {"more_above_sd": MORE_ABOVE_SD, "disagree_span": DISAGREE_SPAN, "max_answers": MAX_ANSWERS}
    params |= {"kind_error_at": thresholds.KIND_ERROR_AT, "kind_min_ratings": thresholds.KIND_MIN_RATINGS}
    params |= {"budget": budget, "spent_before": spent}
    with OutputFolder(
        "annotate-export-more",
        annotate_dir / RATINGS_MORE,
        params,
        {"ratings": upstream["fingerprint"]},
        reads=(ratings_dir,),
    ) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        wanted, rule, why = _selection(ratings_dir, None if budget is None else budget - spent)
        if len(wanted) == 0:
            raise UserError(f"{ratings_dir / ITEMS}: no item needs more ratings (rule: {rule}); nothing was written")
        order = {item_id: n for n, item_id in enumerate(wanted.tolist())}
        reason_of = dict(zip(wanted.tolist(), why.tolist()))
        records = [task for task in read_jsonl(annotate_dir / RATINGS_TASKS / TASKS) if task["item_id"] in order]
        records.sort(key=lambda task: order[task["item_id"]])
        exclude = excluded_workers(ratings_dir)

        out.begin(force=True)
        hits = tasks.hits_table(records, ("item_id", "sentence1", "sentence2", "condition"))
        files = {
            key: str(out.folder / name)
            for key, name in tasks.write_task_files(out.staging, hits, records, "ratings").items()
        }
        write_csv(exclude, out.staging / EXCLUDE)
        files["exclude"] = str(out.folder / EXCLUDE)
        asked = [reason_of[task["item_id"]] for task in records]
        write_csv(pa.table({"item_id": [task["item_id"] for task in records], "reason": asked}),
                  out.staging / REASONS_FILE)  # fmt: skip
        files["reasons"] = str(out.folder / REASONS_FILE)
        counts = {"items": len(records), "exclude_workers": exclude.num_rows}
        counts |= {"spent_before": spent, "spent": spent + len(records)}  # one human rating per item
        reasons_count = {reason: asked.count(reason) for reason in dict.fromkeys(asked)}
        return out.finish(counts, rule=rule, budget=budget, reasons=reasons_count, files=files)


def spent_before(more_dir: Path, ratings_fingerprint: str) -> int:
    """Human ratings asked by the follow-up batches before this one: the last batch's running total when the
    ratings import has changed since it was exported (its results were imported), else the total before it
    (the same round exported again). Each batch asks one rating per item."""
    record = read_record(more_dir)
    if record is None:
        return 0
    counts = record.get("counts", {})
    total = int(counts.get("spent", counts.get("items", 0)))
    before = int(counts.get("spent_before", 0))
    return before if record.get("inputs", {}).get("ratings") == ratings_fingerprint else total


def describe_more(record: dict[str, Any]) -> str:
    """What the command prints."""
    if record.get("status") == "up-to-date":
        return f"up to date: {record['folder']} (nothing to do; --force recomputes)"
    counts, files = record["counts"], record["files"]
    rule = (
        f"posterior sd above {MORE_ABOVE_SD}"
        if record["rule"] == "model"
        else f"ratings {DISAGREE_SPAN}+ points apart or fewer than 2"
    )
    if record.get("budget") is not None:
        left = record["budget"] - counts.get("spent_before", 0)
        rule += f"; the {left} most needed first (--budget {record['budget']}: {counts.get('spent', 0)} spent)"
    why = ", ".join(f"{n} {REASON_WORDS.get(reason, reason)}" for reason, n in record.get("reasons", {}).items())
    return (
        f"{counts['items']} items need more ratings ({rule}; at most {MAX_ANSWERS} answers each)\n"
        + (f"  why:    {why} ({files['reasons']})\n" if why else "")
        + f"  upload: {files['hits']} (1 assignment per HIT)\n  ids:    {files['tasks']}\n"
        f"  close the batch to {counts['exclude_workers']} unreliable worker(s): {files['exclude']}\n"
        "then import the first batch's results and this one's together"
    )
