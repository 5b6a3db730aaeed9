"""The conditions round: export the sampled pairs as condition-writing tasks (with the model's drafts where
`annotate draft` made them), and import what the crowd wrote as (sentence1, sentence2, condition) triplets.

A step with the same inputs and parameters as its stage record is a no-op. An import whose results files are
unreadable or hold no valid row fails before anything changes, so the previous output stays as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import require_record
from csts_pipeline.pipeline.schemas import TRIPLET_SCHEMA
from csts_pipeline.stages.annotate.crowd import screening, tasks
from csts_pipeline.stages.annotate.crowd.files import read_jsonl, write_parquet
from csts_pipeline.stages.annotate.crowd.kept import KeptSource
from csts_pipeline.stages.annotate.labels.sampling import strata_summary, stratified_sample, unique_pairs
from csts_pipeline.stages.annotate.layout import (
    CONDITION_TYPES,
    CONDITIONS,
    CONDITIONS_TASKS,
    PROVENANCE,
    REPORT,
    TASKS,
    TRIPLETS,
    rating_item_id,
)
from csts_pipeline.stages.annotate.steps import drafts, qualification
from csts_pipeline.stages.annotate.steps.options import ConditionsExportOptions, ConditionsImportOptions

# -------------------------------------------------------------------------------------------------------------- export


def export_conditions(
    annotate_dir: Path,
    source: KeptSource,
    options: ConditionsExportOptions = ConditionsExportOptions(),
    *,
    force: bool = False,
) -> dict:
    """Sample n kept pairs (seeded, stratified over image cosine x iou) and write the condition-writing tasks:
    `hits.csv` (MTurk batch input, one HIT per pair) and `tasks.jsonl` (ids, provenance, strata)."""
    n, seed, bins = options.n, options.seed, options.bins
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
        sample = stratified_sample(
            pair_ids, cosine.astype(np.float64), iou.astype(np.float64), n=n, seed=seed, bins=bins
        )
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


# -------------------------------------------------------------------------------------------------------------- import


def import_conditions(
    annotate_dir: Path,
    results: list[Path],
    options: ConditionsImportOptions = ConditionsImportOptions(),
    *,
    force: bool = False,
) -> dict:
    """Validate condition-writing results against the exported tasks; write one (s1, s2, c) triplet per accepted
    condition (`conditions.parquet`, high then low for each pair) and the per-row problems (`report.csv`).
    Rows of workers not qualified (`workers`, or the qualification import's workers.csv) are left out."""
    workers = options.workers
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


# ------------------------------------------------------------------- the (s1, s2, c) triplets the ratings export reads
