"""Label quality at the ratings import: the ordinal model's labels (`--aggregate model`), the workers' table and
the high-against-low check.

With `--aggregate model` each item's label is the posterior mean of the ordinal rater model (stages/annotate/
ordinal.py) with its distribution over 1-5 and a 90% interval, and the not-pertinent verdict comes from a
crowd-kit worker-skill model (stages/annotate/labels/verdict.py) instead of the plain share of flags. Every policy gets
the high-against-low check: a pair whose high condition's label is not above its low condition's is inverted;
with the model, a pair whose order the model holds less likely than thresholds.UNSURE_BELOW is unsure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.schemas import INVERSION_SCHEMA, WORKERS_SCHEMA
from csts_pipeline.stages.annotate.aggregation import model_workers, thresholds, trust, weighing
from csts_pipeline.stages.annotate.aggregation.em import em_answers, kernel, ordinal, shift
from csts_pipeline.stages.annotate.aggregation.model_workers import (
    ModelFit,
)
from csts_pipeline.stages.annotate.aggregation.weighing import Controls, Evidence
from csts_pipeline.stages.annotate.labels import verdict
from csts_pipeline.stages.annotate.labels.agreement import ItemLabels, RatingArrays

MODEL = "model"


@dataclass
class ModelResult:
    """The fitted ordinal model, the not-pertinent verdict, and each item's 90% interval; with language models
    among the raters, what they gave (`models`, model_share), the log10 likelihood ratio per item
    (model_log10_ratio) and each model's fit (model_workers.ModelFit)."""

    fit: ordinal.OrdinalFit
    verdict: verdict.Verdict
    low: np.ndarray
    high: np.ndarray
    models: dict[str, Any] | None = None
    log10_ratio: np.ndarray | None = None
    model_fits: dict[str, ModelFit] = field(default_factory=dict)
    plan: trust.TrustPlan | None = None  # what the batch's evidence settled (trust.plan)


def model_labels(
    ratings: RatingArrays,
    n_items: int,
    *,
    not_pertinent_share: float,
    min_ratings: int,
    ambiguity: float | None = None,
    evidence: Evidence | None = None,
) -> tuple[ItemLabels, ModelResult]:
    """Labels, counts and status as aggregators.PerItem gives them, with the label the model's posterior mean
    and an item not pertinent when the verdict's P(not pertinent) is above `not_pertinent_share`. The batch's
    evidence (trust.plan) decides first: a model that agrees with the people no better than chance is left out
    whole, and where nothing measures the people they are pinned at the reliability their agreement with the
    models implies. `ambiguity`: the shared shift's sd (anchored_fit; None: chosen from the answers)."""
    given = evidence or Evidence()
    anchor, kinds, known, test = given.anchor, given.kinds, given.known, given.test
    on_items = None if kinds is None else kinds[:n_items]
    plan = trust.plan(ratings, n_items, known=known, kinds=on_items, anchor=anchor and anchor[0], test=test and test[0])
    split = model_workers.by_kind(ratings, on_items)
    split = split.subset(~model_workers.dropped_rows(split, plan))
    gold = None
    if anchor is not None:
        on_gold = model_workers.by_kind(anchor[0], _gold_kinds(kinds, n_items))
        gold = (on_gold.subset(~model_workers.dropped_rows(on_gold, plan)), anchor[1])
    fit = weighing.weighed_fit(plan, split, n_items, gold=gold, ambiguity=ambiguity, known=known, test=test)
    fits = model_workers.model_fits(fit, split, plan)
    found = flag_verdict(ratings, n_items, given.controls, fits)
    people = ratings.subset(ratings.human)  # the counts and the status are people's: a model never stands alone
    n_ratings = np.bincount(people.item[people.rated], minlength=n_items)
    answers = np.bincount(people.item, minlength=n_items)
    flags = np.bincount(people.item, weights=people.flagged, minlength=n_items).astype(np.int64)
    label = np.where(n_ratings > 0, fit.label, np.nan)
    status = np.full(n_items, "kept", dtype=object)
    status[n_ratings < min_ratings] = "too_few_ratings"
    status[np.nan_to_num(found.p_flag) > not_pertinent_share] = "not_pertinent"
    status[answers == 0] = "unanswered"
    low, high = fit.interval()
    share = model_share(fit, split, fits) if fits else None
    ratio = model_log10_ratio(fit, split, n_items) if fits else None
    result = ModelResult(fit=fit, verdict=found, low=low, high=high, models=share, log10_ratio=ratio,
                         model_fits=fits, plan=plan)  # fmt: skip
    return ItemLabels(label, n_ratings, answers, flags, status), result


def _gold_kinds(kinds: np.ndarray | None, n_items: int) -> np.ndarray | None:
    return None if kinds is None else kinds[n_items:]


def flag_verdict(
    ratings: RatingArrays, n_items: int, controls: Controls | None, fits: dict[str, ModelFit]
) -> verdict.Verdict:
    """The people's verdict (crowd-kit's Dawid-Skene over their flags), then the models' votes as far as their
    agreement with it and with the hidden controls has earned them (model_workers.weigh_flags: a not-pertinent
    control is a true flag, a numeric one a true "pertinent", so a model that never flags is caught where people
    never flag either); each model's flag skill is added to the verdict's workers and to its fit."""
    people = ratings.subset(ratings.human)
    found = verdict.infer(people.item, people.worker, people.flagged, n_items)
    if ratings.p_flag is None:
        return found
    models = ratings.subset(~ratings.human & np.isfinite(ratings.p_flag))  # a model asked whether it is pertinent
    if len(models.item) == 0:
        return found
    gold = None
    if controls is not None and controls[0].p_flag is not None:
        gold = (controls[0].subset(~controls[0].human), controls[1])
    p_flag, skills = model_workers.weigh_flags(found.p_flag, models, gold)
    for name, skill in skills.items():
        if name in fits:
            fits[name].flag_skill = skill
    names = np.array(list(skills), dtype=str)
    return verdict.Verdict(p_flag, np.concatenate([found.workers.astype(str), names]),
                           np.concatenate([found.skill, list(skills.values())]))  # fmt: skip


def model_log10_ratio(fit: ordinal.OrdinalFit, ratings: RatingArrays, n_items: int) -> np.ndarray:
    """Per item, a log10 likelihood ratio: how many times less likely the models' answers make the people's
    label (the people-only posterior mean, rounded) than the label the models' answers favour most, in powers
    of ten; 0 for a flat answer (no opinion), nan without a model's or a person's answer. Why, beside the
    posterior's width: the posterior takes a model's errors as independent from item to item, but they repeat,
    so a model that outvotes a person must not settle the item; routing asks people there (followup.route)."""
    rated = ratings.subset(ratings.rated)
    code = np.searchsorted(fit.workers, rated.worker.astype(str))
    table = fit.table if fit.table is not None else kernel.response(fit.bias, fit.noise)
    like = ordinal.answer_likelihood(em_answers.answer_matrix(rated.rating, rated.distribution), code, table)
    log_like = np.log(np.maximum(like, 1e-300))
    sums = []
    for side in (rated.human, ~rated.human):
        total = np.zeros((n_items, len(ordinal.SCALE)))
        for t in range(len(ordinal.SCALE)):
            total[:, t] = np.bincount(rated.item[side], weights=log_like[side, t], minlength=n_items)
        sums.append(np.where((np.bincount(rated.item[side], minlength=n_items) > 0)[:, None], total, np.nan))
    heard = np.nan_to_num(sums[0])  # items no person rated: the prior's label, nan at the end
    people = np.exp(heard - heard.max(axis=1, keepdims=True)) * fit.prior
    label = np.rint((people / people.sum(axis=1, keepdims=True)) @ ordinal.SCALE).astype(np.int64)
    models = sums[1]
    at_people = models[np.arange(n_items), np.clip(label, 1, 5) - 1]
    gap = (np.max(models, axis=1) - at_people) / np.log(10)
    return np.where(np.isnan(sums[0][:, 0]), np.nan, gap)


def answer_information(fit: ordinal.OrdinalFit, ratings: RatingArrays) -> np.ndarray:
    """Per row of `ratings.subset(ratings.rated)`: how much the answer moved its item's label, the KL divergence
    of the item's posterior from the posterior without that answer (nats)."""
    rated = ratings.subset(ratings.rated)
    code = np.searchsorted(fit.workers, rated.worker.astype(str))
    table = fit.table if fit.table is not None else kernel.response(fit.bias, fit.noise)
    like = ordinal.answer_likelihood(em_answers.answer_matrix(rated.rating, rated.distribution), code, table)
    post = fit.posterior[rated.item]
    without = post / np.maximum(like, 1e-300)
    without /= without.sum(axis=1, keepdims=True)
    ratio = np.where(post > 0, post / np.maximum(without, 1e-300), 1.0)
    return (post * np.log(ratio)).sum(axis=1)


def model_share(fit: ordinal.OrdinalFit, ratings: RatingArrays, fits: dict[str, ModelFit]) -> dict[str, Any]:
    """The human ratings bought, the model workers' answers, and how many human ratings those answers replaced:
    their information about the labels (answer_information) in units of the mean human rating's. A model's
    answers left out (unreliable, or on its weak kinds) replace nothing; a model of low reliability left in moves
    the labels little and so replaces few ratings, however many answers it gave."""
    rated = ratings.subset(ratings.rated)
    human = rated.human
    information = answer_information(fit, ratings)
    per_rating = float(information[human].mean()) if human.any() else float("nan")
    owner = model_workers.model_name(rated.worker)
    models: list[dict[str, Any]] = []
    for name, found in fits.items():
        worth = float(information[owner == name].sum() / per_rating) if per_rating > 0 else None
        models.append(
            {
                "worker_id": name,
                "answers": sum(k.answers for k in found.kinds),
                "reliability": round(found.reliability, 4),
                "flag_skill": None if found.flag_skill is None else round(found.flag_skill, 4),
                "unreliable": found.unreliable,
                "left_out": found.left_out,
                "weak_kinds": found.weak_kinds,
                "kinds": [k.row() for k in found.kinds],
                "replaced_ratings": None if worth is None else round(worth, 1),
            }
        )
    replaced = sum(m["replaced_ratings"] or 0.0 for m in models)
    bought = int(ratings.human.sum())  # every human answer, flags included
    return {"human_ratings": bought, "models": models, "replaced_ratings": round(replaced, 1)}


def item_columns(model: ModelResult | None, n_ratings: np.ndarray) -> dict[str, pa.Array]:
    """The items table's model columns (null for items without ratings, and for the other policies), as arrays:
    built per column, not per item (issue 60). Rounded by Python's round, whose decimal result np.round does not
    always give."""
    n = len(n_ratings)
    if model is None:
        names = ("distribution", "interval_low", "interval_high", "p_not_pertinent", "model_log10_ratio")
        kinds = (pa.list_(pa.float64()), pa.int64(), pa.int64(), pa.float64(), pa.float64())
        return {name: pa.nulls(n, kind) for name, kind in zip(names, kinds)}
    has = np.asarray(n_ratings) > 0
    posterior = np.asarray(model.fit.posterior, np.float64)[:n]
    values = pa.array(_rounded(posterior[has].ravel(), 6), pa.float64())
    offsets = np.concatenate([[0], np.cumsum(np.where(has, posterior.shape[1], 0))]).astype(np.int32)
    return {
        "distribution": pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(~has)),
        "interval_low": pa.array(np.asarray(model.low)[:n].astype(np.int64), mask=~has),
        "interval_high": pa.array(np.asarray(model.high)[:n].astype(np.int64), mask=~has),
        "p_not_pertinent": _rounded_or_null(model.verdict.p_flag, 6),
        "model_log10_ratio": _rounded_or_null(_or_nans(model.log10_ratio, n), 4),
    }


def _rounded(values: np.ndarray, digits: int) -> np.ndarray:
    """Python's round(v, digits) of each value, as an array: numpy's rint(v * 10^digits) / 10^digits where the
    scaled value is clearly away from a half (the same multiple of 10^-digits, divided once: the same float), and
    Python's round where it is near one (or not finite), whose decimal result numpy's does not always give."""
    values = np.asarray(values, np.float64)
    scale = 10.0**digits
    with np.errstate(invalid="ignore", over="ignore"):  # inf and nan: Python's round below
        scaled = values * scale
        found = np.rint(scaled) / scale
        near = ~(np.abs(np.abs(scaled - np.floor(scaled)) - 0.5) > 1e-6) | ~(np.abs(scaled) < 2.0**40)
    at = np.flatnonzero(near)
    found[at] = [round(v, digits) for v in values[at].tolist()]
    return found


def _rounded_or_null(values: np.ndarray, digits: int) -> pa.Array:
    """Each value rounded to `digits`, null where it is nan."""
    values = np.asarray(values, np.float64)
    missing = np.isnan(values)
    return pa.array(_rounded(np.where(missing, 0.0, values), digits), pa.float64(), mask=missing)


def _or_nans(values: np.ndarray | None, n: int) -> np.ndarray:
    return np.full(n, np.nan) if values is None else values


def workers_table(
    model: ModelResult | None,
    ratings: RatingArrays,
    gold: dict[str, Any] | None = None,
    described: dict[str, dict[str, str]] | None = None,
) -> pa.Table:
    """`workers.parquet`: every worker with accepted answers; reliability, bias and noise from the ordinal model
    (null for one who only flagged, and for the other policies), and for a language model the pooled figures,
    its flag skill and its fit per kind of condition (`kinds`, `weak_kinds`); gold accuracy and answers from the
    hidden gold (`gold`: worker -> hidden_gold.WorkerGold; null and 0 without gold in the batch); a model's kind
    and how its answers were read (`described`: worker -> model_kind, model_reading; null for people)."""
    names, codes = np.unique(ratings.worker.astype(str), return_inverse=True)
    answers = np.bincount(codes, minlength=len(names))
    rated = np.bincount(codes[ratings.rated], minlength=len(names))
    columns: dict[str, Any] = {"worker_id": names, "answers": answers, "ratings": rated}
    for name in ("reliability", "bias", "noise", "flag_skill", "kinds", "weak_kinds"):
        columns[name] = [None] * len(names)
    unreliable = [False] * len(names)
    if model is not None:
        fitted = {w: i for i, w in enumerate(model.fit.workers)}
        at = [fitted.get(w) for w in names]
        for name in ("reliability", "bias", "noise"):
            values = getattr(model.fit, name)
            columns[name] = [None if i is None else round(float(values[i]), 4) for i in at]
        skill = dict(zip(model.verdict.workers, model.verdict.skill))
        columns["flag_skill"] = [None if np.isnan(skill.get(w, np.nan)) else round(float(skill[w]), 4) for w in names]
        plan = model.plan  # an assumed reliability judges no one; one relative to the others' does
        measured = plan is None or plan.people_measured or bool(plan.relative)
        table = model.fit.table if model.fit.table is not None else kernel.response(model.fit.bias, model.fit.noise)
        uniform = kernel.reliability(table)  # the threshold's scale: t uniform, whatever the batch's labels
        unreliable = [measured and i is not None and uniform[i] < thresholds.UNRELIABLE_BELOW for i in at]
        for n, name in enumerate(names):
            found = model.model_fits.get(str(name))
            if found is not None:
                columns["reliability"][n] = round(found.reliability, 4)
                columns["bias"][n], columns["noise"][n] = round(found.bias, 4), round(found.noise, 4)
                columns["kinds"][n] = [k.row() for k in found.kinds]
                columns["weak_kinds"][n] = found.weak_kinds
                unreliable[n] = found.unreliable
    columns["unreliable"] = unreliable
    scored = [(gold or {}).get(w) for w in names]
    columns["gold_accuracy"] = [None if g is None or g.accuracy is None else round(g.accuracy, 4) for g in scored]
    columns["gold_answers"] = [0 if g is None else g.answers for g in scored]
    columns["evidence"] = [_evidence(model, str(name)) for name in names]
    for name in ("model_kind", "model_reading"):
        columns[name] = [(described or {}).get(str(w), {}).get(name) for w in names]
    return pa.table(columns, schema=WORKERS_SCHEMA)


def _evidence(model: ModelResult | None, name: str) -> str | None:
    """What measured a worker's reliability, in words (trust.py); null for the other policies."""
    if model is None or model.plan is None:
        return None
    if name in model.plan.models:
        return trust.model_words(model.plan, name)
    return trust.person_words(model.plan, name)


def workers_summary(model: ModelResult, table: pa.Table, spread_set: bool = False) -> dict[str, Any]:
    """What agreement.json says about the model and the workers: how many, how many unreliable, the threshold,
    the EM iterations, the shared per-item shift's spread (aggregation/em/shift.py; `spread_set`: by `--ambiguity-sd`,
    else chosen from the answers, with each spread's log-likelihood) and the fitted prior over the labels."""
    return {
        "workers": table.num_rows,
        "unreliable": int(np.sum(table.column("unreliable").to_numpy(zero_copy_only=False))),
        "unreliable_below": thresholds.UNRELIABLE_BELOW,
        "trust": None if model.plan is None else model.plan.summary(),
        "flag_skill_below": thresholds.FLAG_SKILL_BELOW,
        "gold_accuracy": _mean_gold_accuracy(table),
        "em_iterations": model.fit.iterations,
        "converged": model.fit.converged,
        "ambiguity_sd": model.fit.ambiguity,
        "ambiguity_sd_from": _spread_from(model.fit, spread_set),
        "ambiguity_sd_log_likelihood": shift.relative_log_likelihoods(model.fit.spread_log_likelihoods),
        "interval_calibrated_on": model.fit.calibration[1] if model.fit.calibration[0] is not None else 0,
        "interval_checked_on": model.fit.calibration[1],
        "label_prior": [round(float(p), 4) for p in model.fit.prior],
        "model_share": model.models,
    }


def _spread_from(fit: ordinal.OrdinalFit, spread_set: bool) -> str:
    """Where the shared shift's spread came from (shift.spread_words says it)."""
    if spread_set:
        return "--ambiguity-sd"
    return shift.FROM_KNOWN if fit.spread_on_known else "the answers"


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
    one, else `unsure` when the model gives the order a probability below thresholds.UNSURE_BELOW."""
    kept = np.flatnonzero(labels.status == "kept")
    pair = np.array([items[i]["pair_id"] for i in kept], np.int64)
    is_high = np.array([items[i]["condition_type"] == "high" for i in kept], bool)
    highs, lows = _partners(kept, pair, is_high)
    label_high, label_low = labels.label[highs], labels.label[lows]
    p_order = model.fit.p_higher(highs, lows) if model is not None else np.full(len(highs), np.nan)
    inverted = label_high <= label_low
    unsure = ~inverted & (p_order < thresholds.UNSURE_BELOW)
    rows = []
    for h, lo, lh, ll, p, inv in zip(highs, lows, label_high, label_low, p_order, inverted):
        if not inv and not (p < thresholds.UNSURE_BELOW):
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
        "unsure_below": thresholds.UNSURE_BELOW if model is not None else None,
        "rate": round(float((inverted | unsure).sum()) / n, 4) if n else None,
    }
    return HighLow(pa.Table.from_pylist(rows, schema=INVERSION_SCHEMA), summary)


def _partners(kept: np.ndarray, pair: np.ndarray, is_high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Item indexes (into the tasks) of the high and low condition of every pair that has both among `kept`."""
    high_pairs, high_at = np.unique(pair[is_high], return_index=True)
    low_pairs, low_at = np.unique(pair[~is_high], return_index=True)
    _, in_high, in_low = np.intersect1d(high_pairs, low_pairs, return_indices=True)
    return kept[is_high][high_at[in_high]], kept[~is_high][low_at[in_low]]
