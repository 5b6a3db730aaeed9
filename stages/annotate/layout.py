"""Where the annotate files live and what their tables hold: folder and file names, ids, column schemas.

One place for these, so the steps, the readers and the docs (docs/annotate.md, docs/schemas.md) agree."""

from __future__ import annotations

import hashlib

import pyarrow as pa
from csts_pipeline.frame.schemas import PROVENANCE

# one folder per step under the annotate folder
CONDITIONS_TASKS = "conditions_tasks"
CONDITIONS = "conditions"
RATINGS_TASKS = "ratings_tasks"
RATINGS = "ratings"
CSTS = "csts"
BWS_TASKS = "bws_tasks"
BWS = "bws"
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
        # drafted_accepted, drafted_edited (with the edit distance to the draft) or written (annotate draft)
        ("origin", pa.string()),
        ("edit_distance", pa.int64()),
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
        # --aggregate model only (null otherwise): posterior over 1..5, the 90% interval, P(not pertinent)
        ("distribution", pa.list_(pa.float64())),
        ("interval_low", pa.int64()),
        ("interval_high", pa.int64()),
        ("p_not_pertinent", pa.float64()),
        # --aggregate model with a model worker (null otherwise): log10 of how many times less likely the models'
        # answers make the people's label than the label they favour (stages/annotate/labels/quality.py, model_gap)
        ("model_gap", pa.float64()),
    ]
)
RATING_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("worker_id", pa.string()),
        ("assignment_id", pa.string()),
        ("rating", pa.int8()),
        ("not_pertinent", pa.bool_()),
        # model workers only (null for people): P(rating = 1..5 | pertinent) and P(not pertinent)
        ("distribution", pa.list_(pa.float64())),
        ("p_not_pertinent", pa.float64()),
    ]
)
BWS_ITEM_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        *((name, pa.int64()) for name in PROVENANCE),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition", pa.string()),
        ("condition_type", pa.string()),
        ("label", pa.float64()),  # the score mapped onto 1-5: 1 + 4 * score_unit
        ("score", pa.float64()),  # (best - worst) / seen, in [-1, 1]
        ("score_unit", pa.float64()),  # the score rescaled to [0, 1]
        ("best", pa.int64()),
        ("worst", pa.int64()),
        ("seen", pa.int64()),
        ("status", pa.string()),  # kept (seen in an annotated tuple) or unanswered
    ]
)
ANNOTATION_SCHEMA = pa.schema(
    [
        ("tuple_id", pa.string()),
        ("worker_id", pa.string()),
        ("assignment_id", pa.string()),
        ("best_item_id", pa.string()),
        ("worst_item_id", pa.string()),
    ]
)
