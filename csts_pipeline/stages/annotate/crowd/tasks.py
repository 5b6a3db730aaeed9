"""The task files handed to the crowd: the batch input (`hits.csv`, one task per row, only what the worker sees;
MTurk's batch CSV as it is), each crowd platform's own files (crowd/platform.py), and a JSONL of the same tasks
with ids and provenance (`tasks.jsonl`) that the imports check results against (the conditions and ratings exports)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.schemas import PROVENANCE
from csts_pipeline.stages.annotate.crowd import platform
from csts_pipeline.stages.annotate.crowd.files import write_csv, write_jsonl
from csts_pipeline.stages.annotate.layout import HITS, TASKS, condition_task_id


def guard_tasks(out: OutputFolder, force: bool) -> None:
    """Task files may already be out with workers: replacing them with different tasks needs --force (new drafted
    conditions for the same tasks do not: they only prefill the page)."""
    record = out.record()
    if record is None or record.get("fingerprint") == out.fingerprint or force:
        return
    inputs = {k: v for k, v in (record.get("inputs") or {}).items() if k != "drafts"}
    if record.get("params") != out.params or inputs != {k: v for k, v in out.inputs.items() if k != "drafts"}:
        raise UserError(
            f"{out.folder}: tasks were already exported from other inputs or parameters ({record.get('params')}); "
            "answers collected for them may not match new ones; --force replaces them"
        )


def condition_tasks(picked: pa.Table, strata: np.ndarray, bins: int) -> list[dict[str, Any]]:
    """One condition-writing task per sampled pair, with its stratum (`strata`: one per row of `picked`)."""
    return [
        {
            "task_id": condition_task_id(row["pair_id"]),
            **{name: row[name] for name in (*PROVENANCE, "sentence1", "sentence2")},
            "image_cosine": round(float(row["image_cosine"]), 6),
            "iou": round(float(row["iou"]), 6),
            "cosine_bin": int(stratum // bins),
            "iou_bin": int(stratum % bins),
        }
        for row, stratum in zip(picked.to_pylist(), strata)
    ]


def rating_tasks(triplets: pa.Table) -> list[dict[str, Any]]:
    """One rating task per (s1, s2, c) triplet; `writer_id` lets the import refuse a writer's own rating."""
    return [
        {
            "item_id": row["item_id"],
            **{name: row[name] for name in (*PROVENANCE, "sentence1", "sentence2", "condition", "condition_type")},
            "writer_id": row["worker_id"],
        }
        for row in triplets.to_pylist()
    ]


def with_drafts(
    records: list[dict[str, Any]], drafted: dict[str, dict[str, str]] | None
) -> tuple[tuple[str, ...], dict[str, int]]:
    """The conditions hits.csv columns and the page's repeated blocks: with drafts (`drafted`, by task id), each
    task carries `draft_high` and `draft_low` (empty where no draft passed) and the page prefills its fields."""
    columns = ("task_id", "sentence1", "sentence2")
    if drafted is None:
        return columns, {"drafts": 0}
    for record in records:
        found = drafted.get(record["task_id"], {})
        record["draft_high"], record["draft_low"] = found.get("high", ""), found.get("low", "")
    return (*columns, "draft_high", "draft_low"), {"drafts": 1}


def hits_table(tasks: list[dict[str, Any]], columns: tuple[str, ...]) -> pa.Table:
    """The batch input: only `columns` (ids and what the worker reads), in task order."""
    return pa.table({name: [task[name] for task in tasks] for name in columns})


def write_task_files(
    folder: Path, hits: pa.Table, tasks: list[dict[str, Any]], page: str, repeats: dict[str, int] | None = None
) -> dict[str, str]:
    """`hits.csv` (what the worker sees), `tasks.jsonl` (ids and provenance) and every crowd platform's task files
    and page for the stage (`page`: the stage; `repeats`: its repeated blocks; crowd/platform.py), each written
    atomically; their paths for the stage record."""
    write_csv(hits, folder / HITS)
    write_jsonl(tasks, folder / TASKS)
    return {"hits": HITS, "tasks": TASKS, **platform.write_tasks(folder, page, hits, repeats)}
