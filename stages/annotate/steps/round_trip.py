"""The five annotate steps, each a thin orchestration: check its inputs, compute everything in memory, and only
then replace its folder under the annotate folder, one atomically written file at a time.

export conditions -> crowd writes a high- and a low-similarity condition per pair -> import conditions ->
export ratings -> crowd rates each (s1, s2, c) on 1-5 and may flag the condition not pertinent -> import ratings
(aggregate, drop flagged items, agreement) -> split (train/validation/test in the C-STS format `train` reads).

A step with the same inputs and parameters as its stage record is a no-op. An import whose results files are
unreadable or hold no valid row fails before anything changes, so the previous output stays as it was."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from csts_pipeline.frame.commit import OutputFolder
from csts_pipeline.frame.errors import UserError
from csts_pipeline.frame.records import file_fingerprint, require_current, require_record
from csts_pipeline.frame.shards import read_table
from csts_pipeline.stages.annotate.crowd import controls, hidden_gold, screening, tasks
from csts_pipeline.stages.annotate.crowd.files import read_jsonl, write_csv, write_json, write_parquet
from csts_pipeline.stages.annotate.crowd.kept import KeptSource
from csts_pipeline.stages.annotate.labels import quality
from csts_pipeline.stages.annotate.labels.aggregators import aggregator
from csts_pipeline.stages.annotate.labels.agreement import AGGREGATES, ItemLabels, RatingArrays, agreement_summary
from csts_pipeline.stages.annotate.labels.sampling import hash64, strata_summary, stratified_sample, unique_pairs
from csts_pipeline.stages.annotate.labels.splits import complete_pairs, csts_table, label_description, label_metadata
from csts_pipeline.stages.annotate.layout import (
    AGREEMENT,
    BWS,
    BWS_TASKS,
    CONDITION_TYPES,
    CONDITIONS,
    CONDITIONS_TASKS,
    CSTS,
    INDIVIDUAL_RATINGS,
    INVERSIONS,
    ITEM_SCHEMA,
    ITEMS,
    LABEL_SOURCES,
    PROVENANCE,
    RATING_SCHEMA,
    RATINGS,
    RATINGS_TASKS,
    REPORT,
    SPLITS,
    TASKS,
    TRIPLET_SCHEMA,
    TRIPLETS,
    WORKERS,
    rating_item_id,
)
from csts_pipeline.stages.annotate.steps import drafts, model_ratings, qualification

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------- 1: export conditions


def export_conditions(annotate_dir: Path, source: KeptSource, n: int, seed: int, bins: int, force: bool) -> dict:
    """Sample n kept pairs (seeded, stratified over image cosine x iou) and write the condition-writing tasks:
    `hits.csv` (MTurk batch input, one HIT per pair) and `tasks.jsonl` (ids, provenance, strata)."""
    if n <= 0:
        raise UserError(f"--n must be positive (got {n})")
    if bins <= 0:
        raise UserError(f"--bins must be positive (got {bins})")
    with OutputFolder(
        "annotate-export-conditions",
        annotate_dir / CONDITIONS_TASKS,
        {"n": n, "seed": seed, "bins": bins},
        {"kept": source.fingerprint} | drafts.drafts_input(annotate_dir),
    ) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        tasks.guard_tasks(out, force)

        numeric, offsets = source.read(("pair_id", "caption_id_1", "caption_id_2", "image_cosine", "iou"))
        for name in numeric.column_names:
            if numeric.column(name).null_count:
                raise UserError(f"{source.name}: {numeric.column(name).null_count} kept row(s) without {name}")
        candidates = unique_pairs(numeric)
        if len(candidates) == 0:
            raise UserError(f"{source.name}: no kept pairs to sample from")

        def column(name: str) -> np.ndarray:
            return numeric.column(name).to_numpy()[candidates]

        pair_ids, cosine, iou = column("pair_id"), column("image_cosine"), column("iou")
        sample = stratified_sample(pair_ids, cosine.astype(np.float64), iou.astype(np.float64), n, seed, bins)
        records = tasks.condition_tasks(source.take(offsets, candidates[sample.rows]), sample.strata[sample.rows], bins)
        columns, repeats = tasks.with_drafts(records, drafts.drafts_for(annotate_dir, records))
        hits = tasks.hits_table(records, columns)
        strata = strata_summary(sample, bins)

        out.begin(force=True)
        files = {
            key: str(out.folder / name)
            for key, name in tasks.write_task_files(out.staging, hits, records, "conditions", repeats).items()
        }
        counts = {"kept_rows": numeric.num_rows, "unique_pairs": len(candidates), "tasks": len(records)}
        return out.finish(
            counts | {"strata": len(strata)},
            strata=strata,
            cosine_edges=[round(float(e), 6) for e in sample.cosine_edges],
            iou_edges=[round(float(e), 6) for e in sample.iou_edges],
            files=files,
        )


# ---------------------------------------------------------------------------------------- 2: import conditions


def import_conditions(annotate_dir: Path, results: list[Path], force: bool, workers: Path | None = None) -> dict:
    """Validate condition-writing results against the exported tasks; write one (s1, s2, c) triplet per accepted
    condition (`conditions.parquet`, high then low for each pair) and the per-row problems (`report.csv`).
    Rows of workers not qualified (`workers`, or the qualification import's workers.csv) are left out."""
    tasks_dir = annotate_dir / CONDITIONS_TASKS
    upstream = require_record(tasks_dir, "annotate export --stage conditions")
    qualified = qualification.qualified_workers(annotate_dir, workers)
    inputs = {"tasks": upstream["fingerprint"], "results": screening.results_fingerprint(results)}
    inputs |= qualification.workers_input(qualified)
    with OutputFolder("annotate-import-conditions", annotate_dir / CONDITIONS, {}, inputs, reads=(tasks_dir,)) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        condition_tasks = read_jsonl(tasks_dir / TASKS)
        screen, answers = screening.screen_conditions(condition_tasks, results, tasks_dir / TASKS, qualified)
        if not answers:
            raise screen.nothing_valid(results, "condition answers")
        triplets = _triplets(condition_tasks, answers)

        out.begin(force=True)
        screen.write_report(out.staging / REPORT)
        write_parquet(pa.Table.from_pylist(triplets, schema=TRIPLET_SCHEMA), out.staging / TRIPLETS)
        counts = {
            "tasks": len(condition_tasks),
            "rows_read": screen.rows_read,
            "accepted": len(answers),
            "excluded_rows": screen.excluded_rows(),
            "unanswered_tasks": len(condition_tasks) - len(answers),
            "triplets": len(triplets),
        }
        if any("draft_high" in task for task in condition_tasks):  # the export offered drafted conditions
            counts |= {name: sum(t["origin"] == name for t in triplets) for name in drafts.ORIGINS}
        files = {"conditions": str(out.folder / TRIPLETS), "report": str(out.folder / REPORT)}
        return out.finish(counts, problems=screen.summary(), files=files)


def _triplets(condition_tasks: list[dict], answers: dict[int, screening.ResultRow]) -> list[dict[str, Any]]:
    """Two (s1, s2, c) rows per answered task, high then low, in task order, with the writer's ids and whether the
    condition was a drafted one accepted, edited, or written."""
    triplets = []
    for task_index in sorted(answers):
        task, row = condition_tasks[task_index], answers[task_index]
        for kind in CONDITION_TYPES:
            origin, distance = drafts.origin(row.text(f"condition_{kind}"), task.get(f"draft_{kind}"))
            triplets.append(
                {
                    "item_id": rating_item_id(task["pair_id"], kind),
                    "task_id": task["task_id"],
                    **{name: task[name] for name in (*PROVENANCE, "sentence1", "sentence2")},
                    "condition": row.text(f"condition_{kind}"),
                    "condition_type": kind,
                    "worker_id": row.text("worker_id") or None,
                    "assignment_id": row.text("assignment_id") or None,
                    "origin": origin,
                    "edit_distance": distance,
                }
            )
    return triplets


# ------------------------------------------------------------------------------------------- 3: export ratings


def export_ratings(
    annotate_dir: Path,
    seed: int,
    force: bool,
    gold_share: float = 0.0,
    gold: Path | None = None,
    source: KeptSource | None = None,
) -> dict:
    """One rating task per (s1, s2, c), in a seeded order that separates a pair's two conditions; the HIT CSV
    hides which condition was meant to be high or low. With `gold_share`, hidden control pairs make up that
    share of the rows, made from the kept pairs of `source` outside the batch (stages/annotate/crowd/controls.py;
    `gold`: a gold file whose rate items not in the qualification test are controls too)."""
    hidden_gold.check_share(gold_share)
    controls.require_source(source, gold_share)
    conditions_dir = annotate_dir / CONDITIONS
    upstream = require_current(
        conditions_dir, "annotate import --stage conditions", {"tasks": annotate_dir / CONDITIONS_TASKS}
    )
    params, inputs = {"seed": seed}, {"conditions": upstream["fingerprint"]}
    if gold_share > 0:
        if gold is not None and not gold.is_file():
            raise UserError(f"{gold}: gold file not found")
        params["gold_share"] = gold_share
        inputs["gold"] = file_fingerprint(gold or qualification.default_gold())
        inputs["kept"] = source.fingerprint
        test = annotate_dir / qualification.QUALIFICATION_TASKS / TASKS
        inputs["qualification_test"] = file_fingerprint(test) if test.is_file() else None
    with OutputFolder(
        "annotate-export-ratings", annotate_dir / RATINGS_TASKS, params, inputs, reads=(conditions_dir,)
    ) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        tasks.guard_tasks(out, force)
        triplets = read_table(conditions_dir / TRIPLETS)
        is_low = triplets.column("condition_type").to_numpy(zero_copy_only=False) == "low"
        key = hash64(triplets.column("pair_id").to_numpy() * 2 + is_low, seed)
        triplets = triplets.take(pa.array(np.argsort(key, kind="stable")))
        real = tasks.rating_tasks(triplets)
        made = controls.make(source, annotate_dir, real, gold, hidden_gold.gold_count(len(real), gold_share), seed)
        records, n_gold = controls.mix(real, made, seed), len(made)

        out.begin(force=True)
        hits = tasks.hits_table(records, ("item_id", "sentence1", "sentence2", "condition"))
        files = {
            key: str(out.folder / name)
            for key, name in tasks.write_task_files(out.staging, hits, records, "ratings").items()
        }
        counts = {"items": len(real), "pairs": len({r["pair_id"] for r in real})}
        if n_gold:
            hidden_gold.write_gold_file(records, out.staging / hidden_gold.GOLD_FILE)
            files["gold"] = str(out.folder / hidden_gold.GOLD_FILE)
            counts |= {"gold_items": n_gold, "gold_share": round(n_gold / len(records), 4)}
        return out.finish(counts, files=files)


# ------------------------------------------------------------------------------------------- 4: import ratings


def import_ratings(
    annotate_dir: Path,
    results: list[Path],
    how: str = "mean",
    not_pertinent_share: float = 0.5,
    min_ratings: int = 1,
    force: bool = False,
    agreement_sample: int | None = None,
    seed: int = 0,
    workers: Path | None = None,
) -> dict:
    """Validate rating results; label each item by the policy `how` (mean, median, or round: the median rounded
    to an integer); drop items that more than `not_pertinent_share` of their raters flag as not pertinent, or
    that have fewer than `min_ratings` ratings; report Fleiss' kappa, Krippendorff's alpha and per-worker
    agreement over the kept items with two or more ratings, and with `agreement_sample` on a seeded sample of
    that many items with three ratings each (the paper's protocol). Rows of workers not qualified are left out
    (`workers`, as for the conditions import)."""
    _check_rating_options(how, not_pertinent_share, min_ratings)
    if agreement_sample is not None and agreement_sample < 1:
        raise UserError(f"--agreement-sample must be at least 1 (got {agreement_sample})")
    tasks_dir = annotate_dir / RATINGS_TASKS
    upstream = require_current(tasks_dir, "annotate export --stage ratings", {"conditions": annotate_dir / CONDITIONS})
    params = {"aggregate": how, "not_pertinent_share": not_pertinent_share, "min_ratings": min_ratings}
    params |= {"agreement_sample": agreement_sample, "seed": seed if agreement_sample is not None else None}
    qualified = qualification.qualified_workers(annotate_dir, workers)
    inputs = {"tasks": upstream["fingerprint"], "results": screening.results_fingerprint(results)}
    inputs |= qualification.workers_input(qualified)
    inputs |= model_ratings.model_input(annotate_dir)  # `annotate rate`'s worker, when it ran
    with OutputFolder("annotate-import-ratings", annotate_dir / RATINGS, params, inputs, reads=(tasks_dir,)) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        tasks_all = read_jsonl(tasks_dir / TASKS)
        by_model = model_ratings.model_answers(annotate_dir, tasks_all)
        screen, accepted = screening.screen_ratings(tasks_all, results, tasks_dir / TASKS, qualified)
        gold = hidden_gold.GoldCheck.of(tasks_all, accepted) if any(map(hidden_gold.is_gold, tasks_all)) else None
        if gold is not None and gold.blocked:
            screen, accepted = screening.screen_ratings(tasks_all, results, tasks_dir / TASKS, qualified, gold.blocked)
        if not accepted:
            raise screen.nothing_valid(results, "ratings")
        accepted = accepted + by_model.ratings
        parts = hidden_gold.separate(tasks_all, accepted)
        items, accepted = parts.items, parts.accepted
        if not accepted:
            raise screen.nothing_valid(results, "ratings")
        ratings = RatingArrays.of(accepted)
        anchor = (RatingArrays.of(parts.anchor), parts.anchor_truth) if parts.anchor else None
        policy = aggregator(how, not_pertinent_share, min_ratings, anchor)
        labels = policy.fit(ratings, len(items))
        model = policy.result
        agreement = {"label_policy": how, **agreement_summary(ratings, labels.status, agreement_sample, seed)}
        checks = quality.high_low(items, labels, model)
        workers = quality.workers_table(model, ratings, gold.workers if gold else None)
        agreement |= {
            "high_low": checks.summary,
            "model_workers": quality.workers_summary(model, workers) if model else None,
            "gold": gold.summary() if gold else None,
        }

        out.begin(force=True)
        screen.write_report(out.staging / REPORT)
        write_parquet(_item_table(items, labels, quality.item_columns(model, labels.ratings)), out.staging / ITEMS)
        write_parquet(_individual_table(items, accepted, by_model.soft), out.staging / INDIVIDUAL_RATINGS)
        write_parquet(workers, out.staging / WORKERS)
        write_csv(checks.table, out.staging / INVERSIONS)
        write_json(out.staging / AGREEMENT, agreement)
        if gold is not None:
            write_csv(gold.blocklist(), out.staging / hidden_gold.BLOCKLIST)
        status = labels.status
        counts = {
            "items": len(items),
            "rows_read": screen.rows_read,
            "ratings_accepted": len(accepted),
            "excluded_rows": screen.excluded_rows(),
            **{f"items_{name}": int((status == name).sum()) for name in ("kept", "not_pertinent", "too_few_ratings")},
            "items_unanswered": int((status == "unanswered").sum()),
        }
        files = {name: str(out.folder / name) for name in (ITEMS, INDIVIDUAL_RATINGS, AGREEMENT, WORKERS, INVERSIONS)}
        files["report"] = str(out.folder / REPORT)
        if gold is not None:
            files["blocklist"] = str(out.folder / hidden_gold.BLOCKLIST)
            counts |= {"gold_answers": agreement["gold"]["answers"], "workers_blocked": len(gold.blocked)}
        figures = {name: agreement[name] for name in ("fleiss_kappa", "alpha_ordinal", "alpha_interval")}
        return out.finish(counts, problems=screen.summary(), label_policy=how, **figures, files=files)


def _check_rating_options(how: str, not_pertinent_share: float, min_ratings: int) -> None:
    if how not in AGGREGATES:
        raise UserError(f"--aggregate must be mean, median, round or model (got {how!r})")
    if not 0 <= not_pertinent_share < 1:
        raise UserError(f"--not-pertinent-share must be in [0, 1) (got {not_pertinent_share})")
    if min_ratings < 1:
        raise UserError(f"--min-ratings must be at least 1 (got {min_ratings})")


def _item_table(items: list[dict], labels: ItemLabels, extra: dict[str, list]) -> pa.Table:
    """`items.parquet`: every rating item with its label, counts and status (and the model's `extra` columns)."""
    rows = [
        {
            **{name: task[name] for name in ("item_id", *PROVENANCE, "sentence1", "sentence2", "condition")},
            "condition_type": task["condition_type"],
            "label": None if np.isnan(labels.label[i]) else float(labels.label[i]),
            "ratings": int(labels.ratings[i]),
            "not_pertinent": int(labels.flags[i]),
            "answers": int(labels.answers[i]),
            "status": labels.status[i],
            **{name: values[i] for name, values in extra.items()},
        }
        for i, task in enumerate(items)
    ]
    return pa.Table.from_pylist(rows, schema=ITEM_SCHEMA)


def _individual_table(
    items: list[dict], accepted: list[screening.Rating], soft: dict[tuple[str, str], dict] | None = None
) -> pa.Table:
    """`ratings.parquet`: every accepted rating, so labels and agreement can be recomputed; a model worker's rows
    (`soft`, by item and worker) also carry its most likely digit, distribution and P(not pertinent)."""
    rows = [
        {
            "item_id": items[a.item]["item_id"],
            "worker_id": a.worker,
            "assignment_id": a.assignment or None,
            "rating": a.rating,
            "not_pertinent": a.not_pertinent,
            **(soft or {}).get((items[a.item]["item_id"], a.worker), {}),
        }
        for a in accepted
    ]
    return pa.Table.from_pylist(rows, schema=RATING_SCHEMA)


# ----------------------------------------------------------------------------------------------------- 5: split


def split(
    annotate_dir: Path, seed: int, ratios: tuple[float, float, float], force: bool, labels: str = "likert"
) -> dict:
    """Train/validation/test from the kept labelled items (`labels`: likert ratings, or bws scores mapped to
    1-5): only pairs whose high and low conditions were both kept, grouped by sentence pair; written as C-STS
    Parquet and CSV (docs/schemas.md), the Parquet carrying the label scale and source in its metadata."""
    if labels not in LABEL_SOURCES:
        raise UserError(f"--labels must be likert or bws (got {labels!r})")
    ratings_dir = annotate_dir / (RATINGS if labels == "likert" else BWS)
    step = "annotate import --stage ratings" if labels == "likert" else "annotate import --stage bws"
    tasks_dir = annotate_dir / (RATINGS_TASKS if labels == "likert" else BWS_TASKS)
    upstream = require_current(ratings_dir, step, {"tasks": tasks_dir})
    with OutputFolder(
        "annotate-split",
        annotate_dir / CSTS,
        {"seed": seed, "ratios": [round(r, 6) for r in ratios], "labels": labels},
        {labels: upstream["fingerprint"]},
        reads=(ratings_dir,),
    ) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        items = read_table(ratings_dir / ITEMS)
        kept = items.filter(pc.equal(items.column("status"), "kept"))
        complete, complete_ids = complete_pairs(kept)
        if complete.num_rows == 0:
            raise UserError(
                f"{ratings_dir / ITEMS}: no sentence pair has both its high and its low condition kept; "
                "nothing to split"
            )
        table, sentence_pairs = csts_table(complete, seed, ratios)
        described = label_description(labels, upstream["params"])
        table = table.replace_schema_metadata(label_metadata(described))
        parts = {name: table.filter(pc.equal(table.column("split"), name)) for name in SPLITS}

        out.begin(force=True)
        counts: dict[str, Any] = {
            "kept_items": kept.num_rows,
            "incomplete_pairs_dropped": len(np.setdiff1d(kept.column("pair_id").to_numpy(), complete_ids)),
            "sentence_pairs": sentence_pairs,
        }
        for name, part in parts.items():
            write_parquet(part, out.staging / f"{name}.parquet")
            write_csv(part, out.staging / f"{name}.csv")
            counts[f"{name}_rows"] = part.num_rows
            counts[f"{name}_pairs"] = len(np.unique(part.column("pair_id").to_numpy()))
            if part.num_rows == 0:
                log.warning("annotate split: %s is empty (%d sentence pairs in all)", name, sentence_pairs)
        files = {name: str(out.folder / f"{name}.parquet") for name in SPLITS}
        return out.finish(counts, labels=described, files=files)
