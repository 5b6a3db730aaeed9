"""Scoring shared by `train` and `evaluate`: batched prediction, Spearman and Pearson (x100, as the C-STS paper
reports them), the predictions Parquet and the metrics JSON (schemas in docs/schemas.md)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from scipy.stats import rankdata

from csts_pipeline.pipeline.device import autocast_dtype
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import write_json
from csts_pipeline.pipeline.shards import write_atomic, write_table
from csts_pipeline.stages.train.data import PairData
from csts_pipeline.stages.train.models import CstsModel, Tokenized

# Columns copied from the input into the predictions, when present.
CARRIED_COLUMNS = (
    "pair_id",
    "image_id_1",
    "image_id_2",
    "caption_id_1",
    "caption_id_2",
    "condition_type",
    "split",
)


def half_precision(device: torch.device, precision: str) -> torch.dtype | None:
    """The autocast dtype for `precision` (auto, fp32, fp16, bf16); half precision is for CUDA devices."""
    if device.type == "cpu" and precision in ("fp16", "bf16"):
        raise UserError(f"--precision {precision} needs a CUDA device; use fp32 (or auto) on the CPU")
    return autocast_dtype(device, precision)


def precision_context(device: torch.device, dtype: torch.dtype | None):
    """Autocast to half precision where asked (CUDA), a no-op otherwise."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def predict(
    model: CstsModel,
    tokenized: Tokenized,
    device: torch.device,
    batch_size: int,
    dtype: torch.dtype | None = None,
) -> np.ndarray:
    """Scores for every row, in row order; batches are length-sorted so that little of each is padding."""
    order = np.argsort(-tokenized.lengths, kind="stable")
    scores = np.empty(len(order), np.float32)
    was_training = model.training
    model.eval()
    with torch.inference_mode(), precision_context(device, dtype):
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batch = {k: v.to(device, non_blocking=True) for k, v in model.collate(tokenized, rows).items()}
            scores[rows] = model(**batch).float().cpu().numpy()
    model.train(was_training)
    return scores


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x = np.asarray(x, np.float64) - np.mean(x)
    y = np.asarray(y, np.float64) - np.mean(y)
    denominator = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denominator) if denominator > 0 else float("nan")


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson of the ranks, ties given their average rank (as scipy.stats.spearmanr)."""
    return pearson(rankdata(x), rankdata(y))


def correlations(scores: np.ndarray, labels: np.ndarray | None) -> dict:
    """{'spearman', 'pearson'} x100 and 'n'; null correlations for unlabelled rows or constant scores."""
    n = len(scores)
    if labels is None or n < 2:
        return {"spearman": None, "pearson": None, "n": n}
    values = {"spearman": spearman(scores, labels), "pearson": pearson(scores, labels)}
    return {**{k: None if np.isnan(v) else round(100 * v, 4) for k, v in values.items()}, "n": n}


def predictions_table(data: PairData, scores: np.ndarray) -> pa.Table:
    table = data.table
    columns = {
        "row": pa.array(np.arange(len(data), dtype=np.int64)),
        "sentence1": table["sentence1"],
        "sentence2": table["sentence2"],
        "condition": table["condition"],
        "label": table["label"],
        "score": pa.array(scores, pa.float32()),
    }
    columns.update({name: table[name] for name in CARRIED_COLUMNS if name in table.column_names})
    return pa.table(columns)


def score_split(
    model: CstsModel,
    data: PairData,
    device: torch.device,
    batch_size: int,
    dtype: torch.dtype | None = None,
) -> tuple[np.ndarray, dict]:
    scores = predict(model, model.tokenize(data), device, batch_size, dtype)
    return scores, correlations(scores, data.labels() if data.labelled else None)


def metrics_document(metrics: dict[str, dict]) -> dict:
    """The metrics JSON: {spearman, pearson, n} for one split; keyed by split where there are several."""
    if len(metrics) == 1:
        return next(iter(metrics.values()))
    return metrics


def write_outputs(results: dict[str, tuple[PairData, np.ndarray, dict]], metrics_path: Path) -> dict:
    """The metrics JSON at `metrics_path` and `predictions_<split>.parquet` next to it; returns the metrics."""
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    for split, (data, scores, _) in results.items():
        write_table(predictions_table(data, scores), metrics_path.parent / f"predictions_{split}.parquet")
        if not data.labelled:
            write_submission(metrics_path.parent / f"{split}_predictions.json", scores)
    document = metrics_document({split: metrics for split, (_, _, metrics) in results.items()})
    write_json(metrics_path, document)
    return document


def write_submission(path: Path, scores: np.ndarray) -> None:
    """Hidden labels (the official test split): {"row index": score}, the JSON the authors'
    make_test_submission.py reads (it expects 4,732 rows for the official test file). A NaN or infinity would
    make the file invalid JSON for the authors' server, so it is refused here rather than found there."""
    bad = np.flatnonzero(~np.isfinite(np.asarray(scores, np.float64)))
    if len(bad):
        raise UserError(f"{path.name}: {len(bad)} non-finite predicted scores (first at row {bad[0]}); not written")
    document = {str(index): float(score) for index, score in enumerate(scores)}
    blob = (json.dumps(document, indent=1, allow_nan=False) + "\n").encode()  # row order, not sort_keys' order
    write_atomic(path, lambda handle: handle.write(blob))


def write_metrics(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, document)


def format_table(metrics: dict[str, dict]) -> str:
    """A short table: split, n, Spearman, Pearson."""

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = [f"{'split':<12} {'n':>7} {'spearman':>9} {'pearson':>9}"]
    for split, values in metrics.items():
        lines.append(f"{split:<12} {values['n']:>7} {cell(values['spearman']):>9} {cell(values['pearson']):>9}")
    return "\n".join(lines)
