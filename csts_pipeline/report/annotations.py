"""The annotation summary, when `<work_dir>/annotate/` holds finished steps: answers per worker in each step,
the histogram of the kept items' labels, and the agreement the imports measured (read from what they wrote,
not recomputed). File names come from stages.annotate.layout, the annotate folder's published layout."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from csts_pipeline.pipeline.records import read_json, read_record
from csts_pipeline.pipeline.shards import read_table
from csts_pipeline.report.plots import label_histogram
from csts_pipeline.stages.annotate.aggregation import model_workers, trust
from csts_pipeline.stages.annotate.aggregation.em import interval
from csts_pipeline.stages.annotate.layout import (
    AGREEMENT,
    ANNOTATIONS,
    BWS,
    CONDITIONS,
    INDIVIDUAL_RATINGS,
    ITEMS,
    RATINGS,
    RELIABILITY,
    TRIPLETS,
    WORKERS,
    require_current_ratings,
)

# step folder -> (its table of answers, what one answer is)
STEPS = {
    CONDITIONS: (TRIPLETS, "conditions written"),
    RATINGS: (INDIVIDUAL_RATINGS, "ratings"),
    BWS: (ANNOTATIONS, "best-worst answers"),
}


def _workers(table_path: Path) -> list[tuple[str, int]]:
    counts = Counter(read_table(table_path, ["worker_id"]).column("worker_id").to_pylist())
    return sorted(((worker or "(none)", n) for worker, n in counts.items()), key=lambda item: (-item[1], item[0]))


def _agreement(folder: Path) -> list[tuple[str, str]]:
    """The headline agreement figures of a ratings or BWS import."""
    if (folder / AGREEMENT).is_file():
        found = read_json(folder / AGREEMENT)
        names = [("fleiss_kappa", "Fleiss' kappa"), ("alpha_ordinal", "Krippendorff's alpha (ordinal)"),
                 ("alpha_interval", "Krippendorff's alpha (interval)"), ("items", "items with 2+ ratings")]  # fmt: skip
        rows = [(label, _number(found.get(key))) for key, label in names]
        flagged = [w["worker_id"] for w in found.get("workers", []) if w.get("flagged")]
        flag_label = f"workers flagged (Spearman below {found.get('flag_below')})"
        return [*rows, (flag_label, ", ".join(flagged) or "none"), *_weights(found), *_model_share(found)]
    if (folder / RELIABILITY).is_file():
        found = read_json(folder / RELIABILITY)
        return [("split-half reliability (Spearman)", _number(found.get("spearman"))),
                ("Spearman-Brown corrected", _number(found.get("spearman_brown")))]  # fmt: skip
    return []


def _weights(found: dict[str, Any]) -> list[tuple[str, str]]:
    """With the rater model: where the workers' weights came from and what set the 90% intervals."""
    model = found.get("model_workers") or {}
    if not model.get("trust"):
        return []
    intervals = interval.interval_words(model.get("interval_calibrated_on"), model.get("interval_checked_on"))
    return [("weights", trust.summary_words(model)), ("intervals", intervals)]


def _evidence(folder: Path) -> dict[str, str]:
    """Per worker, what measured their reliability (workers.parquet's `evidence`), where the import wrote it."""
    path = folder / WORKERS
    if not path.is_file() or "evidence" not in read_table(path).schema.names:
        return {}
    table = read_table(path, ["worker_id", "evidence"]).to_pylist()
    return {str(r["worker_id"]): str(r["evidence"]) for r in table if r["evidence"]}


def _model_share(found: dict[str, Any]) -> list[tuple[str, str]]:
    """With language models among the raters: the human ratings bought, and the ones the models' answers replaced
    (stages/annotate/labels/quality.py, model_share)."""
    share = (found.get("model_workers") or {}).get("model_share")
    if not share or not share.get("models"):
        return []
    rows = [("human ratings bought", _number(share["human_ratings"]))]
    rows.append(("human ratings the models' answers replaced", model_workers.as_count(share["replaced_ratings"])))
    for m in share["models"]:
        rows.append((m["worker_id"], model_workers.describe(m)))
    return rows


def _number(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else f"{value:,}"


def annotation_summary(annotate_dir: Path, assets: Path) -> dict[str, Any] | None:
    """What the page shows of the annotation steps that finished; None when there are none."""
    steps = []
    for step, (table, answer) in STEPS.items():
        folder = annotate_dir / step
        if read_record(folder) is None or not (folder / table).is_file():
            continue
        if step == RATINGS:  # never a summary of ratings whose model rows a new `annotate rate` replaced
            require_current_ratings(annotate_dir)
        workers = _workers(folder / table)
        entry = {"name": step, "answer": answer, "answers": sum(n for _, n in workers), "workers": workers}
        entry |= {"agreement": _agreement(folder), "label_histogram": None, "evidence": _evidence(folder)}
        if (folder / ITEMS).is_file():
            items = read_table(folder / ITEMS, ["label", "status"])
            kept = items.filter(pc.equal(items.column("status"), "kept")).column("label").drop_null()
            if len(kept):
                entry["label_histogram"] = f"labels_{step}.png"
                label_histogram(kept.to_numpy().astype(np.float64), f"{step}: labels of the kept items",
                                assets / entry["label_histogram"])  # fmt: skip
        steps.append(entry)
    return {"folder": str(annotate_dir), "steps": steps} if steps else None
