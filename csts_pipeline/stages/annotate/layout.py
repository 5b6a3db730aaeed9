"""Where the annotate files live and what their tables hold: folder and file names, ids, column schemas.

One place for these, so the steps, the readers and the docs (docs/annotate.md, docs/schemas.md) agree."""

from __future__ import annotations

import hashlib
from pathlib import Path

from csts_pipeline.pipeline.schemas import PROVENANCE

# one folder per step under the annotate folder
CONDITIONS_TASKS = "conditions_tasks"
CONDITIONS = "conditions"
RATINGS_TASKS = "ratings_tasks"
RATINGS = "ratings"
CSTS = "csts"
BWS_TASKS = "bws_tasks"
BWS = "bws"
MODEL_RATINGS = "model_ratings"  # `annotate rate`: a language model's ratings, one more worker in the ratings import
RATINGS_IMPORT = "annotate import --stage ratings --results FILE"  # the command that rebuilds RATINGS
# files inside them
HITS = "hits.csv"
TASKS = "tasks.jsonl"
QUALIFICATION_TASKS = "qualification_tasks"  # the qualification test's export folder
REPORT = "report.csv"
TRIPLETS = "conditions.parquet"
ITEMS = "items.parquet"
INDIVIDUAL_RATINGS = "ratings.parquet"
AGREEMENT = "agreement.json"
WORKERS = "workers.parquet"  # ratings/: per-worker reliability and bias
INVERSIONS = "inversions.csv"  # ratings/: pairs whose high condition is not surely above the low one
BWS_ITEMS = "items.jsonl"  # bws_tasks/: the items the tuples index
ANNOTATIONS = "annotations.parquet"  # bws/: the accepted best/worst answers
RELIABILITY = "reliability.json"  # bws/: split-half reliability
AUDIT_FOLDER = "audit"  # `annotate audit --out <annotate>/audit`: where the report looks for it
AUDIT_JSON = "audit.json"

KEPT_COLUMNS = (*PROVENANCE, "sentence1", "sentence2", "image_cosine", "iou")
CONDITION_TYPES = ("high", "low")
RATING_SCALE = (1, 5)
SPLITS = ("train", "validation", "test")
LABEL_SOURCES = ("likert", "bws")
_MASK64 = (1 << 64) - 1


def ratings_sources(annotate_dir: Path) -> dict[str, Path]:
    """What the ratings import was computed from (its record's input key -> that folder), for every step that reads
    it (split, export --more, publish, report): a new ratings export or a new `annotate rate` makes it stale."""
    return {"tasks": annotate_dir / RATINGS_TASKS, MODEL_RATINGS: annotate_dir / MODEL_RATINGS}


def condition_task_id(pair_id: int) -> str:
    """`c-` and the pair id as 16 hex digits (caption_id_1's 8, then caption_id_2's): stable across re-exports."""
    return f"c-{pair_id & _MASK64:016x}"


def rating_item_id(pair_id: int, condition_type: str) -> str:
    """`r-`, the pair id's 16 hex digits and the condition type: one rating item per written condition."""
    return f"r-{pair_id & _MASK64:016x}-{condition_type}"


def bws_tuple_id(index: int, item_ids: list[str]) -> str:
    """`b-` and 16 hex digits of a hash of the tuple's place in the design and its item ids in order: ids are
    unique within a design (even when, with very few items, two tuples show the same items in the same order),
    and results of another design name ids this one does not know."""
    return "b-" + hashlib.blake2b(f"{index}|{'|'.join(item_ids)}".encode(), digest_size=8).hexdigest()
