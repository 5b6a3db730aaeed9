"""Where the annotate files live and what their tables hold: folder and file names, ids, column schemas.

One place for these, so the steps, the readers and the docs (docs/annotate.md, docs/schemas.md) agree."""

from __future__ import annotations

import pyarrow as pa

from pipeline.schemas import PROVENANCE

# one folder per step under the annotate folder
CONDITIONS_TASKS = "conditions_tasks"
CONDITIONS = "conditions"
RATINGS_TASKS = "ratings_tasks"
RATINGS = "ratings"
CSTS = "csts"
# files inside them
HITS = "hits.csv"
TASKS = "tasks.jsonl"
REPORT = "report.csv"
TRIPLETS = "conditions.parquet"
ITEMS = "items.parquet"
INDIVIDUAL_RATINGS = "ratings.parquet"
AGREEMENT = "agreement.json"

KEPT_COLUMNS = (*PROVENANCE, "sentence1", "sentence2", "image_cosine", "iou")
CONDITION_TYPES = ("high", "low")
RATING_SCALE = (1, 5)
SPLITS = ("train", "validation", "test")
_MASK64 = (1 << 64) - 1


def condition_task_id(pair_id: int) -> str:
    """`c-` and the pair id as 16 hex digits (caption_id_1's 8, then caption_id_2's): stable across re-exports."""
    return f"c-{pair_id & _MASK64:016x}"


def rating_item_id(pair_id: int, condition_type: str) -> str:
    """`r-`, the pair id's 16 hex digits and the condition type: one rating item per written condition."""
    return f"r-{pair_id & _MASK64:016x}-{condition_type}"


REPORT_SCHEMA = pa.schema(
    [("file", pa.string()), ("row", pa.int64()), ("id", pa.string()), ("problem", pa.string()), ("detail", pa.string())]
)
TRIPLET_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("task_id", pa.string()),
        *((name, pa.int64()) for name in PROVENANCE),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition", pa.string()),
        ("condition_type", pa.string()),
        ("worker_id", pa.string()),
        ("assignment_id", pa.string()),
    ]
)
ITEM_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        *((name, pa.int64()) for name in PROVENANCE),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition", pa.string()),
        ("condition_type", pa.string()),
        ("label", pa.float64()),
        ("ratings", pa.int64()),
        ("not_pertinent", pa.int64()),
        ("answers", pa.int64()),
        ("status", pa.string()),
    ]
)
RATING_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("worker_id", pa.string()),
        ("assignment_id", pa.string()),
        ("rating", pa.int8()),
        ("not_pertinent", pa.bool_()),
    ]
)
