"""The two Best-Worst Scaling steps, the alternative to Likert ratings:
export the 4-tuples of (s1, s2, c) items for the crowd, and import the best/worst answers into counting
scores with their split-half reliability. `annotate split --labels bws` then takes the scores, mapped to 1-5."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import require_current
from csts_pipeline.pipeline.schemas import ANNOTATION_SCHEMA, BWS_ITEM_SCHEMA
from csts_pipeline.pipeline.shards import read_table
from csts_pipeline.stages.annotate.crowd import screening, tasks
from csts_pipeline.stages.annotate.crowd.files import read_jsonl, write_json, write_jsonl, write_parquet
from csts_pipeline.stages.annotate.labels import bws_scores
from csts_pipeline.stages.annotate.layout import (
    ANNOTATIONS,
    BWS,
    BWS_ITEMS,
    BWS_TASKS,
    CONDITIONS,
    CONDITIONS_TASKS,
    ITEMS,
    PROVENANCE,
    RELIABILITY,
    REPORT,
    TASKS,
    TRIPLETS,
    bws_tuple_id,
)
from csts_pipeline.stages.annotate.steps import qualification
from csts_pipeline.stages.annotate.steps.options import BwsExportOptions, BwsImportOptions

HIT_FIELDS = ("sentence1", "sentence2", "condition")


def export_bws(annotate_dir: Path, options: BwsExportOptions = BwsExportOptions(), *, force: bool = False) -> dict:
    """One BWS item per written condition, arranged in seeded 4-tuples (about 2N for N items, each item in
    `appearances` tuples); `hits.csv` shows each tuple's four items without ids or condition types."""
    seed, appearances = options.seed, options.appearances
    conditions_dir = annotate_dir / CONDITIONS
    upstream = require_current(
        conditions_dir, "annotate import --stage conditions", {"tasks": annotate_dir / CONDITIONS_TASKS}
    )
    params = {"seed": seed, "appearances": appearances}
    inputs = {"conditions": upstream["fingerprint"]}
    with OutputFolder("annotate-export-bws", annotate_dir / BWS_TASKS, params, inputs, reads=(conditions_dir,)) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        tasks.guard_tasks(out, force)
        triplets = read_table(conditions_dir / TRIPLETS)
        items = tasks.rating_tasks(triplets)
        design = bws_scores.design_tuples(len(items), seed, appearances)
        item_ids = np.array([item["item_id"] for item in items], dtype=object)
        tuple_ids = [bws_tuple_id(index, list(row)) for index, row in enumerate(item_ids[design])]
        hits: dict[str, Any] = {"tuple_id": tuple_ids}
        for position in range(bws_scores.TUPLE_SIZE):
            rows = pa.array(design[:, position])
            for name in HIT_FIELDS:
                hits[f"{name}_{position + 1}"] = triplets.column(name).take(rows)
        records = [{"tuple_id": t, "item_ids": list(row)} for t, row in zip(tuple_ids, item_ids[design])]

        out.begin(force=True)
        written = tasks.write_task_files(out.staging, pa.table(hits), records, "bws")
        files = {key: str(out.folder / name) for key, name in written.items()}
        write_jsonl(items, out.staging / BWS_ITEMS)
        files["items"] = str(out.folder / BWS_ITEMS)
        stats = bws_scores.design_stats(design, len(items))
        return out.finish({"items": len(items), "tuples": len(records)}, design=stats, files=files)


def import_bws(
    annotate_dir: Path, results: list[Path], options: BwsImportOptions = BwsImportOptions(), *, force: bool = False
) -> dict:
    """Validate best-worst results against the exported tuples; score every item by counting and measure the
    split-half reliability (`repeats` random splits from `seed`). Rows of workers not qualified are left out."""
    repeats, seed, workers = options.repeats, options.seed, options.workers
    if repeats < 1:
        raise UserError(f"--repeats must be at least 1 (got {repeats})")
    tasks_dir = annotate_dir / BWS_TASKS
    upstream = require_current(tasks_dir, "annotate export --stage bws", {"conditions": annotate_dir / CONDITIONS})
    qualified = qualification.qualified_workers(annotate_dir, workers)
    inputs = {"tasks": upstream["fingerprint"], "results": screening.results_fingerprint(results)}
    inputs |= qualification.workers_input(qualified)
    params = {"repeats": repeats, "seed": seed}
    with OutputFolder("annotate-import-bws", annotate_dir / BWS, params, inputs, reads=(tasks_dir,)) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        tuple_records = read_jsonl(tasks_dir / TASKS)
        items = read_jsonl(tasks_dir / BWS_ITEMS)
        index = {item["item_id"]: i for i, item in enumerate(items)}
        design = np.array([[index[i] for i in t["item_ids"]] for t in tuple_records], np.int64).reshape(
            -1, bws_scores.TUPLE_SIZE
        )
        screen, accepted = screening.screen_bws(tuple_records, results, tasks_dir / TASKS, qualified)
        if not accepted:
            raise screen.nothing_valid(results, "best-worst answers")
        annotations = _annotations(design, accepted)
        scores = bws_scores.counting_scores(design, annotations, len(items))
        reliability = bws_scores.split_half(design, annotations, len(items), repeats, seed)
        per_tuple = np.bincount(annotations.tuple_index, minlength=len(design))
        spread = np.unique(per_tuple, return_counts=True)
        reliability["annotations_per_tuple"] = {str(k): int(v) for k, v in zip(*spread)}

        out.begin(force=True)
        screen.write_report(out.staging / REPORT)
        write_parquet(_item_table(items, scores), out.staging / ITEMS)
        write_parquet(_annotation_table(tuple_records, items, design, accepted), out.staging / ANNOTATIONS)
        write_json(out.staging / RELIABILITY, reliability)
        counts = {
            "tuples": len(design),
            "items": len(items),
            "rows_read": screen.rows_read,
            "accepted": len(accepted),
            "excluded_rows": screen.excluded_rows(),
            "tuples_answered": int((per_tuple > 0).sum()),
            "items_scored": int((scores.seen > 0).sum()),
            "items_unanswered": int((scores.seen == 0).sum()),
            "workers": len(np.unique(annotations.worker)),
        }
        files = {name: str(out.folder / name) for name in (ITEMS, ANNOTATIONS, RELIABILITY)}
        files["report"] = str(out.folder / REPORT)
        return out.finish(counts, problems=screen.summary(), reliability=reliability, files=files)


def _annotations(design: np.ndarray, accepted: list[screening.Choice]) -> bws_scores.Annotations:
    """The accepted answers as arrays, with the chosen positions turned into item indices."""
    tuple_index = np.array([c.tuple_index for c in accepted], np.int64)
    best = design[tuple_index, np.array([c.best for c in accepted], np.int64)]
    worst = design[tuple_index, np.array([c.worst for c in accepted], np.int64)]
    return bws_scores.Annotations(tuple_index, best, worst, np.array([c.worker for c in accepted]))


def _item_table(items: list[dict[str, Any]], scores: bws_scores.Scores) -> pa.Table:
    """`bws/items.parquet`: every item with its counts, its score and the score mapped onto 1-5."""
    columns = {name: [item[name] for item in items] for name in ("item_id", *PROVENANCE, *HIT_FIELDS)}
    columns["condition_type"] = [item["condition_type"] for item in items]

    def nullable(values: np.ndarray) -> pa.Array:
        return pa.array(values, pa.float64(), mask=np.isnan(values))

    seen = scores.seen > 0
    columns |= {
        "label": nullable(scores.likert),
        "score": nullable(scores.score),
        "score_unit": nullable(scores.unit),
        "best": scores.best,
        "worst": scores.worst,
        "seen": scores.seen,
        "status": np.where(seen, "kept", "unanswered"),
    }
    return pa.table(columns, schema=BWS_ITEM_SCHEMA)


def _annotation_table(
    tuple_records: list[dict], items: list[dict], design: np.ndarray, accepted: list[screening.Choice]
) -> pa.Table:
    """`bws/annotations.parquet`: every accepted answer with the chosen items' ids, so scores can be recomputed."""
    rows = [
        {
            "tuple_id": tuple_records[c.tuple_index]["tuple_id"],
            "worker_id": c.worker,
            "assignment_id": c.assignment or None,
            "best_item_id": items[design[c.tuple_index, c.best]]["item_id"],
            "worst_item_id": items[design[c.tuple_index, c.worst]]["item_id"],
        }
        for c in accepted
    ]
    return pa.Table.from_pylist(rows, schema=ANNOTATION_SCHEMA)
