"""Where the annotate files live and what their tables hold: folder and file names, ids, column schemas.

One place for these, so the steps, the readers and the docs (docs/annotate.md, docs/schemas.md) agree."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import read_record, require_current
from csts_pipeline.pipeline.schemas import PROVENANCE

# one folder per step under the annotate folder
CONDITIONS_TASKS = "conditions_tasks"
CONDITIONS = "conditions"
RATINGS_TASKS = "ratings_tasks"
RATINGS = "ratings"
CSTS = "csts"
BWS_TASKS = "bws_tasks"
BWS = "bws"
MODEL_RATINGS = "model_ratings"  # `annotate rate`: one folder per model worker (model_dir), each a worker of the import
RATINGS_IMPORT = "annotate import --stage ratings --results FILE"  # the command that rebuilds RATINGS
# files inside them
HITS = "hits.csv"
TASKS = "tasks.jsonl"
QUALIFICATION_TASKS = "qualification_tasks"  # the qualification test's export folder
QUALIFICATION = "qualification"  # the qualification import's folder (workers.csv, answers.csv)
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
LABEL_SPREADS = ("import", "answers")  # --label-spread: the import's labels as they are, or spread as the answers
_MASK64 = (1 << 64) - 1


def ratings_sources(annotate_dir: Path) -> dict[str, Path]:
    """What the ratings import was computed from (its record's input key -> that folder), for every step that reads
    it (split, export --more, publish, report): a new ratings export, a qualification re-import whose workers or
    answers it read, or a rerun of a model it weighed, makes it stale. A model folder's key is
    `model_ratings/<folder>` (model_input_key)."""
    found = {"tasks": annotate_dir / RATINGS_TASKS, QUALIFICATION: annotate_dir / QUALIFICATION}
    models = annotate_dir / MODEL_RATINGS
    for folder in sorted(models.iterdir()) if models.is_dir() else []:
        if folder.is_dir() and folder.name[0] not in "._":
            found[model_input_key(folder)] = folder
    return found


def require_current_ratings(annotate_dir: Path) -> dict[str, Any]:
    """The ratings import's record, current against ratings_sources; and, unless it named its models
    (`--models`), with no model folder new since it ran: it weighs every model there, so a re-import would weigh
    the new one too, and the labels it wrote leave that model's answers out."""
    folder = annotate_dir / RATINGS
    sources = ratings_sources(annotate_dir)
    record = require_current(folder, RATINGS_IMPORT, sources)
    if "models" in record.get("params", {}):
        return record
    for key, source in sources.items():
        if key.startswith(f"{MODEL_RATINGS}/") and key not in record.get("inputs", {}) and read_record(source):
            raise UserError(
                f"{folder}: stale: the {source.name} output is new since it was computed (it weighs every model "
                f"there); rerun `csts-pipeline {RATINGS_IMPORT}` first"
            )
    return record


def model_dir(annotate_dir: Path, worker: str) -> Path:
    """The folder of one model worker's answers (`model:<name>`): its name made safe for a path, and 8 hex digits
    of the worker id, so two names that read alike never share a folder."""
    name = re.sub(r"[^A-Za-z0-9.-]+", "-", worker.removeprefix("model:")).strip(".-")[:60] or "model"
    digest = hashlib.blake2b(worker.encode(), digest_size=4).hexdigest()
    return annotate_dir / MODEL_RATINGS / f"{name}-{digest}"


def model_input_key(folder: Path) -> str:
    """The ratings import's input key of a model folder."""
    return f"{MODEL_RATINGS}/{folder.name}"


def move_older_layout(annotate_dir: Path) -> None:
    """An older version kept one model's answers in `model_ratings/` itself: they move, whole (answer cache
    included), into that model's own folder (model_dir); a move a crash cut is finished here."""
    top, aside = annotate_dir / MODEL_RATINGS, annotate_dir / f".{MODEL_RATINGS}.v1"
    if read_record(top) is not None:
        top.rename(aside)
    record = read_record(aside)
    if record is None:
        return
    top.mkdir(exist_ok=True)
    aside.rename(model_dir(annotate_dir, str(record["worker_id"])))


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
