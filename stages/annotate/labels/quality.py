"""Label quality at the ratings import: the ordinal model's labels (`--aggregate model`), the workers' table and
the high-against-low check (docs/annotate.md, "Label quality").

With `--aggregate model` each item's label is the posterior mean of the ordinal rater model (stages/annotate/
ordinal.py) with its distribution over 1-5 and a 90% interval, and the not-pertinent verdict comes from a
crowd-kit worker-skill model (stages/annotate/labels/verdict.py) instead of the plain share of flags. Every policy gets
the high-against-low check: a pair whose high condition's label is not above its low condition's is inverted;
with the model, a pair whose order the model holds less likely than UNSURE_BELOW is unsure."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
from csts_pipeline.frame.schemas import WORKERS_SCHEMA
from csts_pipeline.stages.annotate.labels import ordinal, verdict
from csts_pipeline.stages.annotate.labels.agreement import ItemLabels, RatingArrays

MODEL = "model"
UNRELIABLE_BELOW = 0.5  # a worker whose reliability is below this answers close to at random
UNSURE_BELOW = 0.9  # P(high condition's true label > low's) below this: the order is not established
INVERSION_SCHEMA = pa.schema(
    [
        ("pair_id", pa.int64()),
        ("problem", pa.string()),  # inverted (high's label <= low's) or unsure (the model's P below UNSURE_BELOW)
        ("label_high", pa.float64()),
        ("label_low", pa.float64()),
        ("p_high_above_low", pa.float64()),
        ("item_id_high", pa.string()),
        ("item_id_low", pa.string()),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition_high", pa.string()),
        ("condition_low", pa.string()),
    ]
)


@dataclass
class ModelResult:
    """The fitted ordinal model, the not-pertinent verdict, and each item's 90% interval."""

    fit: ordinal.OrdinalFit
    verdict: verdict.Verdict
    low: np.ndarray
    high: np.ndarray


Anchor = tuple[RatingArrays, np.ndarray]  # ratings of gold items (indexed 0..) and their true labels


def anchored_fit(ratings: RatingArrays, n_items: int, anchor: Anchor | None) -> ordinal.OrdinalFit:
    """The ordinal model on the items' ratings, with the gold items' ratings appended after them and their
    known labels fixed (ordinal.fit's `known`); the posterior returned is the items' only."""
    rated = ratings.rated
    item, worker, rating = ratings.item[rated], ratings.worker[rated], ratings.rating[rated]
    if anchor is None:
        return ordinal.fit(item, worker, rating, n_items)
    gold, truth = anchor
    ok = gold.rated
    known = np.concatenate([np.zeros(n_items, np.int64), truth])
    fit = ordinal.fit(
        np.concatenate([item, gold.item[ok] + n_items]),
        np.concatenate([worker, gold.worker[ok]]),
        np.concatenate([rating, gold.rating[ok]]),
        n_items + len(truth),
        known=known,
    )
    return replace(fit, posterior=fit.posterior[:n_items])


def model_labels(
    ratings: RatingArrays, n_items: int, not_pertinent_share: float, min_ratings: int, anchor: Anchor | None = None
) -> tuple[ItemLabels, ModelResult]:
    """Labels, counts and status as agreement.label_items gives them, with the label the model's posterior mean
    and an item not pertinent when the verdict's P(not pertinent) is above `not_pertinent_share`."""
    rated = ratings.rated
    fit = anchored_fit(ratings, n_items, anchor)
    found = verdict.infer(ratings.item, ratings.worker, ratings.flagged, n_items)
    n_ratings = np.bincount(ratings.item[rated], minlength=n_items)
    answers = np.bincount(ratings.item, minlength=n_items)
    flags = np.bincount(ratings.item, weights=ratings.flagged, minlength=n_items).astype(np.int64)
    label = np.where(n_ratings > 0, fit.label, np.nan)
    status = np.full(n_items, "kept", dtype=object)
    status[n_ratings < min_ratings] = "too_few_ratings"
    status[np.nan_to_num(found.p_flag) > not_pertinent_share] = "not_pertinent"
    status[answers == 0] = "unanswered"
    low, high = fit.interval()
    return ItemLabels(label, n_ratings, answers, flags, status), ModelResult(fit, found, low, high)


def item_columns(model: ModelResult | None, n_ratings: np.ndarray) -> dict[str, list[Any]]:
    """The items table's model columns (null for items without ratings, and for the other policies)."""
    n = len(n_ratings)
    if model is None:
        return {name: [None] * n for name in ("distribution", "interval_low", "interval_high", "p_not_pertinent")}
    has = n_ratings > 0
    p_flag = model.verdict.p_flag
    return {
        "distribution": [[round(float(p), 6) for p in row] if h else None for row, h in zip(model.fit.posterior, has)],
        "interval_low": [int(v) if h else None for v, h in zip(model.low, has)],
        "interval_high": [int(v) if h else None for v, h in zip(model.high, has)],
        "p_not_pertinent": [None if np.isnan(p) else round(float(p), 6) for p in p_flag],
    }


def workers_table(model: ModelResult | None, ratings: RatingArrays, gold: dict[str, Any] | None = None) -> pa.Table:
    """`workers.parquet`: every worker with accepted answers; reliability, bias and noise from the ordinal model
    (null for one who only flagged, and for the other policies); gold accuracy and answers from the hidden gold
    (`gold`: worker -> hidden_gold.WorkerGold; null and 0 without gold in the batch)."""
    names, codes = np.unique(ratings.worker.astype(str), return_inverse=True)
    answers = np.bincount(codes, minlength=len(names))
    rated = np.bincount(codes[ratings.rated], minlength=len(names))
    columns: dict[str, Any] = {"worker_id": names, "answers": answers, "ratings": rated}
    for name in ("reliability", "bias", "noise", "flag_skill"):
        columns[name] = [None] * len(names)
    if model is not None:
        fitted = {w: i for i, w in enumerate(model.fit.workers)}
        at = [fitted.get(w) for w in names]
        for name in ("reliability", "bias", "noise"):
            values = getattr(model.fit, name)
            columns[name] = [None if i is None else round(float(values[i]), 4) for i in at]
        skill = dict(zip(model.verdict.workers, model.verdict.skill))
        columns["flag_skill"] = [None if np.isnan(skill.get(w, np.nan)) else round(float(skill[w]), 4) for w in names]
    columns["unreliable"] = [r is not None and r < UNRELIABLE_BELOW for r in columns["reliability"]]
    scored = [(gold or {}).get(w) for w in names]
    columns["gold_accuracy"] = [None if g is None or g.accuracy is None else round(g.accuracy, 4) for g in scored]
    columns["gold_answers"] = [0 if g is None else g.answers for g in scored]
    return pa.table(columns, schema=WORKERS_SCHEMA)


def workers_summary(model: ModelResult, table: pa.Table) -> dict[str, Any]:
    """What agreement.json says about the model and the workers: how many, how many unreliable, the threshold,
    the EM iterations and the fitted prior over the labels."""
    return {
        "workers": table.num_rows,
        "unreliable": int(np.sum(table.column("unreliable").to_numpy(zero_copy_only=False))),
        "unreliable_below": UNRELIABLE_BELOW,
        "gold_accuracy": _mean_gold_accuracy(table),
        "em_iterations": model.fit.iterations,
        "converged": model.fit.converged,
        "label_prior": [round(float(p), 4) for p in model.fit.prior],
    }


def _mean_gold_accuracy(table: pa.Table) -> float | None:
    """The share of right gold answers over the workers in the table (None without gold answers)."""
    answers = table.column("gold_answers").to_numpy()
    accuracy = np.array([np.nan if a is None else a for a in table.column("gold_accuracy").to_pylist()], float)
    if answers.sum() == 0:
        return None
    return round(float(np.nansum(accuracy * answers) / answers.sum()), 4)


@dataclass
class HighLow:
    """Pairs with both conditions kept, and the ones that fail the check."""

    table: pa.Table
    summary: dict[str, Any]


def high_low(items: list[dict], labels: ItemLabels, model: ModelResult | None) -> HighLow:
    """Each pair with its high and its low condition kept: `inverted` when the high label is not above the low
    one, else `unsure` when the model gives the order a probability below UNSURE_BELOW."""
    kept = np.flatnonzero(labels.status == "kept")
    pair = np.array([items[i]["pair_id"] for i in kept], np.int64)
    is_high = np.array([items[i]["condition_type"] == "high" for i in kept], bool)
    highs, lows = _partners(kept, pair, is_high)
    label_high, label_low = labels.label[highs], labels.label[lows]
    p_order = model.fit.p_higher(highs, lows) if model is not None else np.full(len(highs), np.nan)
    inverted = label_high <= label_low
    unsure = ~inverted & (p_order < UNSURE_BELOW)
    rows = []
    for h, lo, lh, ll, p, inv in zip(highs, lows, label_high, label_low, p_order, inverted):
        if not inv and not (p < UNSURE_BELOW):
            continue
        task_h, task_l = items[h], items[lo]
        rows.append(
            {
                "pair_id": task_h["pair_id"],
                "problem": "inverted" if inv else "unsure",
                "label_high": float(lh),
                "label_low": float(ll),
                "p_high_above_low": None if np.isnan(p) else round(float(p), 4),
                "item_id_high": task_h["item_id"],
                "item_id_low": task_l["item_id"],
                "sentence1": task_h["sentence1"],
                "sentence2": task_h["sentence2"],
                "condition_high": task_h["condition"],
                "condition_low": task_l["condition"],
            }
        )
    n = len(highs)
    summary = {
        "pairs": n,
        "inverted": int(inverted.sum()),
        "unsure": int(unsure.sum()),
        "unsure_below": UNSURE_BELOW if model is not None else None,
        "rate": round(float((inverted | unsure).sum()) / n, 4) if n else None,
    }
    return HighLow(pa.Table.from_pylist(rows, schema=INVERSION_SCHEMA), summary)


def _partners(kept: np.ndarray, pair: np.ndarray, is_high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Item indexes (into the tasks) of the high and low condition of every pair that has both among `kept`."""
    high_pairs, high_at = np.unique(pair[is_high], return_index=True)
    low_pairs, low_at = np.unique(pair[~is_high], return_index=True)
    _, in_high, in_low = np.intersect1d(high_pairs, low_pairs, return_indices=True)
    return kept[is_high][high_at[in_high]], kept[~is_high][low_at[in_low]]
