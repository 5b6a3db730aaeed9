"""The C-STS split: the rated items into train/validation/test in the C-STS format `train` reads, keeping a pair's
high and low conditions in one split."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import require_current
from csts_pipeline.pipeline.shards import read_table
from csts_pipeline.stages.annotate.crowd.files import write_csv, write_parquet
from csts_pipeline.stages.annotate.labels.agreement import is_model_worker
from csts_pipeline.stages.annotate.labels.splits import (
    complete_pairs,
    csts_table,
    label_description,
    label_metadata,
    parse_ratios,
    spread_as_answers,
)
from csts_pipeline.stages.annotate.layout import (
    BWS,
    BWS_TASKS,
    CSTS,
    INDIVIDUAL_RATINGS,
    ITEMS,
    LABEL_SOURCES,
    LABEL_SPREADS,
    RATINGS,
    RATINGS_TASKS,
    SPLITS,
    require_current_ratings,
)
from csts_pipeline.stages.annotate.steps import model_folders
from csts_pipeline.stages.annotate.steps.options import SplitOptions

log = logging.getLogger(__name__)


def split(annotate_dir: Path, options: SplitOptions = SplitOptions(), *, force: bool = False) -> dict:
    """Train/validation/test from the kept labelled items (`labels`: likert ratings, or bws scores mapped to
    1-5): only pairs whose high and low conditions were both kept, grouped by sentence pair; written as C-STS
    Parquet and CSV (docs/schemas.md), the Parquet carrying the label scale and source in its metadata."""
    seed, labels, spread = options.seed, options.labels, options.label_spread
    ratios = parse_ratios(options.ratios)
    if labels not in LABEL_SOURCES:
        raise UserError(f"--labels must be likert or bws (got {labels!r})")
    if spread not in LABEL_SPREADS or (spread != "import" and labels != "likert"):
        raise UserError(f"--label-spread must be one of {', '.join(LABEL_SPREADS)}, and import with --labels bws "
                        f"(got {spread!r})")  # fmt: skip
    ratings_dir = annotate_dir / (RATINGS if labels == "likert" else BWS)
    step = f"annotate import --stage {'ratings' if labels == 'likert' else 'bws'} --results FILE"
    tasks_dir = annotate_dir / (RATINGS_TASKS if labels == "likert" else BWS_TASKS)
    if labels == "likert":  # a new `annotate rate` makes the likert import stale
        upstream = require_current_ratings(annotate_dir)
        model_folders.require_learnt_current(annotate_dir, upstream)  # and a crossfit on other people's answers
    else:
        upstream = require_current(ratings_dir, step, {"tasks": tasks_dir})
    with OutputFolder(
        "annotate-split",
        annotate_dir / CSTS,
        {"seed": seed, "ratios": [round(r, 6) for r in ratios], "labels": labels, "label_spread": spread},
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
        if spread == "answers":
            complete = _spread_as_answers(complete, ratings_dir / INDIVIDUAL_RATINGS)
        table, sentence_pairs = csts_table(complete, seed, ratios)
        described = label_description(labels, upstream["params"], spread=spread)
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


def people_answers(ratings_file: Path) -> np.ndarray:
    """The people's own 1-5 ratings in the import's `ratings.parquet` (not a model's; a flag is no rating)."""
    ratings = read_table(ratings_file, columns=["worker_id", "rating"])
    rating = ratings.column("rating").to_numpy(zero_copy_only=False)
    people = ~is_model_worker(ratings.column("worker_id").to_numpy(zero_copy_only=False)) & (rating > 0)
    if not people.any():
        raise UserError(f"{ratings_file}: no person's rating to take the spread from; use --label-spread import")
    return rating[people]


def _spread_as_answers(complete: pa.Table, ratings_file: Path) -> pa.Table:
    """The items' labels in their order, given the spread of the people's own ratings."""
    spread = spread_as_answers(complete.column("label").to_numpy(), people_answers(ratings_file))
    return complete.set_column(complete.schema.get_field_index("label"), "label", pa.array(spread, pa.float64()))
