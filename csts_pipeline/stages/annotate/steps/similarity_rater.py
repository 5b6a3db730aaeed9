"""`annotate rate --similarity-model NAME`: a similarity model (a `csts-pipeline train` output, or any
sentence-transformers model, the packaged all-MiniLM-L6-v2 included) rates every item of the ratings export as
one more worker `model:<name>`.

A similarity model gives a score, not a rating: a cosine in [-1, 1] for a bi-encoder (each sentence encoded with
the condition as a tokenizer pair, as `train` and `evaluate` encode C-STS rows), a regression score for a trained
cross-encoder. Mapping it onto 1-5 by a fixed rule would claim a calibration nobody measured. So the score itself
is the answer the ratings import reads (`scores.parquet`): as the normal score of its rank in the batch, through a
normal density per true label that the rater model learns against the people and the hidden gold
(aggregation/em/score_density.py). Each row also carries the score's bin among BINS bins cut at the quantiles of this
batch's scores (bin 1 the lowest fifth) as `rating`, with a one-hot `distribution`, so the rows keep the ratings
schema; the bin edges stay in the record (`bin_edges`). A similarity model says nothing
about pertinence: its rows never flag, and `p_not_pertinent` is null (not asked).

The items are the ratings export's rows, hidden controls included, as a language model rates them, so the
record's `inputs.tasks` ties the answers to that export and the ratings import refuses them once it changes.
Output: the model's own folder `<annotate>/model_ratings/<name>-<hash>/` (layout.model_dir; a rerun of one model
leaves the others' answers in place, steps/model_folders.py), with `ratings.parquet` in the ratings schema."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import file_fingerprint, fingerprint, require_current
from csts_pipeline.pipeline.schemas import RATING_SCHEMA
from csts_pipeline.stages.annotate.crowd.files import read_jsonl, write_parquet
from csts_pipeline.stages.annotate.layout import (
    CONDITIONS,
    INDIVIDUAL_RATINGS,
    RATINGS_TASKS,
    TASKS,
    model_dir,
    move_older_layout,
)
from csts_pipeline.stages.annotate.steps.model_ratings import ITEM_FIELDS, SCORES

BINS = 5  # one bin per point of the 1-5 scale
SCORES_SCHEMA = pa.schema([("item_id", pa.string()), ("score", pa.float64()), ("bin", pa.int8())])
BEST = "best"  # the trained model inside a `csts-pipeline train` output folder


@dataclass
class SimilarityModel:
    """A loaded similarity model: `score` gives one similarity per (sentence1, sentence2, condition) row."""

    name: str  # what the worker id calls it
    identity: dict[str, Any]  # what the step's fingerprint holds: the path and its files' hashes
    model: Any  # stages.train.models.CstsModel
    device: Any
    batch_size: int = 64

    def score(self, items: list[dict[str, Any]]) -> np.ndarray:
        """The model's score of each item, in order (a bi-encoder's cosine under the condition)."""
        from csts_pipeline.stages.train.data import PairData
        from csts_pipeline.stages.train.scoring import score_split

        columns = {name: pa.array([item[name] for item in items], pa.string()) for name in ITEM_FIELDS}
        table = pa.table({**columns, "label": pa.nulls(len(items), pa.float64())})
        scores, _ = score_split(self.model, PairData(table, "the rating items"), self.device, self.batch_size)
        return scores.astype(np.float64)


def model_folder(name: str) -> str:
    """What to load for `name`: a `train` output folder's best/ model, else the name itself (a trained model's
    folder, a sentence-transformers folder or name, `packaged:NAME`)."""
    from csts_pipeline.stages.train.models import SPEC_FILE

    best = Path(name) / BEST
    return str(best) if (best / SPEC_FILE).is_file() else name


def open_similarity_model(name: str, batch_size: int = 64, device: str = "auto") -> SimilarityModel:
    """Load the model once (a trained model with its own encoding and heads; any other as a zero-shot bi-encoder
    with its own pooling, as `csts-pipeline evaluate` scores it)."""
    from csts_pipeline.pipeline.device import resolve_device
    from csts_pipeline.pipeline.packaged_models import resolve_model_path
    from csts_pipeline.stages.train.evaluate import EvaluateOptions, model_for

    if batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {batch_size})")
    source = model_folder(name)
    if Path(name).exists() and not Path(name).is_dir():
        raise UserError(f"{name}: a similarity model is a folder (a `train` output or a sentence-transformers model)")
    torch_device = resolve_device(device)
    model = model_for(EvaluateOptions(model=source, data=Path("."))).to(torch_device)
    path = Path(resolve_model_path(source))
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else []
    identity = {"kind": "similarity", "model": name, "files": {p.name: file_fingerprint(p) for p in files}}
    return SimilarityModel(short_name(name), identity, model, torch_device, batch_size)


def short_name(name: str) -> str:
    """The worker's name: the model folder's or hub name's last part (a `train` output's folder for its best/)."""
    path = Path(name.removeprefix("packaged:").rstrip("/"))
    if path.name == BEST:
        path = path.resolve().parent
    elif path.is_dir():
        path = path.resolve()
    return path.name or name


def ordinal_bins(scores: np.ndarray, n_bins: int = BINS) -> tuple[np.ndarray, np.ndarray]:
    """Each score's bin 1..n_bins, cut at the batch's quantiles (equal shares), and the n_bins - 1 inner edges;
    a score on an edge goes up. Ties stay in one bin, so a batch of equal scores is all in one bin."""
    edges = np.quantile(scores, np.arange(1, n_bins) / n_bins)
    return (np.searchsorted(edges, scores, side="right") + 1).astype(np.int64), edges


def ratings_rows(items: list[dict[str, Any]], bins: np.ndarray, worker: str) -> pa.Table:
    """One row per item in the ratings schema: the bin as the rating, one-hot, never flagged, pertinence not
    asked (null)."""
    one_hot = np.eye(BINS)[bins - 1]
    return pa.table(
        {
            "item_id": [item["item_id"] for item in items],
            "worker_id": [worker] * len(items),
            "assignment_id": pa.nulls(len(items), pa.string()),
            "rating": pa.array(bins, pa.int8()),
            "not_pertinent": np.zeros(len(items), bool),
            "distribution": [row.tolist() for row in one_hot],
            "p_not_pertinent": pa.nulls(len(items), pa.float64()),
        },
        schema=RATING_SCHEMA,
    )


def rate_similarity(
    annotate_dir: Path, model: SimilarityModel | str, force: bool = False, batch_size: int = 64, device: str = "auto"
) -> dict[str, Any]:
    """Score every row of the ratings export with `model` (loaded, or a name to load once the items are known to
    be there) and write its binned answers as the model worker's rows; a no-op when the model and the items are
    unchanged."""
    tasks_dir = annotate_dir / RATINGS_TASKS
    upstream = require_current(tasks_dir, "annotate export --stage ratings", {"conditions": annotate_dir / CONDITIONS})
    if isinstance(model, str):
        model = open_similarity_model(model, batch_size, device)
    worker = f"model:{model.name}"
    params = {"model": model.identity, "bins": BINS, "answer": "quantile bins of the batch, one-hot"}
    inputs = {"tasks": upstream["fingerprint"]}
    move_older_layout(annotate_dir)
    with OutputFolder("annotate-rate", model_dir(annotate_dir, worker), params, inputs, reads=(tasks_dir,)) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        items = [{"item_id": t["item_id"], **{f: t[f] for f in ITEM_FIELDS}} for t in read_jsonl(tasks_dir / TASKS)]
        if not items:
            raise UserError(f"{tasks_dir / TASKS}: no items to rate")
        scores = model.score(items)
        if not np.isfinite(scores).all():
            raise UserError(f"{model.identity['model']}: gave a score that is not a number on some items")
        bins, edges = ordinal_bins(scores)
        out.begin(force=True)
        write_parquet(ratings_rows(items, bins, worker), out.staging / INDIVIDUAL_RATINGS)
        ids = [item["item_id"] for item in items]
        scored = pa.table({"item_id": ids, "score": scores, "bin": pa.array(bins, pa.int8())}, schema=SCORES_SCHEMA)
        write_parquet(scored, out.staging / SCORES)
        per_bin = np.bincount(bins, minlength=BINS + 1)[1:].tolist()
        counts = {"items": len(items), "not_pertinent": 0, "per_bin": per_bin}
        return out.finish(
            counts,
            worker_id=worker,
            model=model.identity,
            model_fingerprint=fingerprint(model.identity),
            bin_edges=[round(float(e), 6) for e in edges],
            score_range=[round(float(scores.min()), 6), round(float(scores.max()), 6)],
            files={"ratings": str(out.folder / INDIVIDUAL_RATINGS), "scores": str(out.folder / SCORES)},
        )


def describe_similarity(record: dict[str, Any]) -> str:
    """What `annotate rate --similarity-model` did, as the command line prints it."""
    edges = ", ".join(f"{e:.3f}" for e in record["bin_edges"])
    return (
        f"{record['counts']['items']} items scored by {record['worker_id']} -> {record['files']['ratings']}\n"
        f"  answers: the score (its bin 1-{BINS} among this batch's quantiles kept too: edges {edges}; items per "
        f"bin {record['counts']['per_bin']}); the ratings import reads the score through a density per true label "
        "that it learns against people and gold"
    )
