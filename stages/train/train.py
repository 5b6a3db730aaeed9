"""train: fine-tune a C-STS model (cross, bi or tri-encoder; MSE, Quad or Quad+MSE) on C-STS-format data.

Reader: stages.train.data (C-STS CSV or Parquet shards, one source per split or a `split` column). Model:
stages.train.models. Loop: AdamW (no decay on biases and norms), linear schedule with warmup, gradient
accumulation, autocast on CUDA, evaluation on the validation split after each epoch, the best epoch kept in
`<out>/best/`. Writer: `best/`, `metrics.json`, `predictions_<split>.parquet`, `train_record.json` (docs/schemas.md).
A checkpoint after each epoch makes an interrupted run resume where it stopped; a rerun with the same data and
parameters is a no-op.
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from pipeline.device import resolve_device
from pipeline.errors import UserError
from pipeline.packaged_models import resolve_model_path
from pipeline.records import STARTED, StageRun, file_fingerprint, fingerprint, read_record, write_json
from pipeline.shards import SHARD_GLOB
from stages.train.data import PairData, label_scale, quad_pairs, read_csts
from stages.train.models import CstsModel, ModelSpec, Tokenized, load_model, model_pooling
from stages.train.scoring import (
    correlations,
    half_precision,
    precision_context,
    predict,
    score_split,
    write_metrics,
    write_outputs,
)

log = logging.getLogger(__name__)
STAGE = "train"
CHECKPOINT = "checkpoint.pt"
PROBE_ROWS = 256  # training rows whose loss is measured before training and after each epoch

# Hyperparameters when neither --preset nor an option says otherwise.
DEFAULTS: dict[str, object] = {
    "model": "packaged:all-MiniLM-L6-v2",
    "encoding": "bi",
    "objective": "mse",
    "pooler": "auto",
    "transform": False,
    "tri_head": "hadamard",
    "margin": 1.0,
    "learning_rate": 2e-5,
    "batch_size": 16,
    "grad_accum": 1,
    "epochs": 3,
    "weight_decay": 0.01,
    "warmup_ratio": 0.1,
    "max_grad_norm": 1.0,
    "max_length": 128,
    "seed": 42,
    "precision": "auto",
}

# `--preset paper`: the hyperparameters of the authors' released script (princeton-nlp/c-sts, run_sts.sh and
# run_sts.py defaults), the same for all three encodings there. Sources per value in docs/train.md.
PRESETS: dict[str, dict[str, object]] = {
    "paper": {
        "model": "princeton-nlp/sup-simcse-roberta-large",
        "pooler": "cls",  # their `cls` reads the [CLS] hidden state (the model is loaded without its pooler)
        "transform": False,
        "tri_head": "hadamard",
        "margin": 1.0,
        "learning_rate": 1e-5,
        "batch_size": 4,
        "grad_accum": 8,
        "epochs": 3,
        "weight_decay": 0.1,
        "warmup_ratio": 0.1,
        "max_grad_norm": 0.0,  # no clipping
        "max_length": 512,
        "seed": 42,
    },
}


@dataclass
class TrainOptions:
    """Every `train` option; `None` means the preset's (or the default) value."""

    train: Path
    out: Path
    validation: Path | None = None
    test: Path | None = None
    preset: str | None = None
    model: str | None = None
    encoding: str | None = None
    objective: str | None = None
    pooler: str | None = None
    transform: bool | None = None
    tri_head: str | None = None
    margin: float | None = None
    learning_rate: float | None = None
    batch_size: int | None = None
    grad_accum: int | None = None
    epochs: int | None = None
    max_steps: int | None = None
    weight_decay: float | None = None
    warmup_ratio: float | None = None
    max_grad_norm: float | None = None
    max_length: int | None = None
    seed: int | None = None
    precision: str | None = None
    min_label: float | None = None
    max_label: float | None = None
    condition_only: bool = False
    sentences_only: bool = False
    device: str = "auto"
    eval_batch_size: int = 64
    metrics_out: Path | None = None


@dataclass
class Hyper:
    """The resolved hyperparameters (defaults <- preset <- options)."""

    model: str
    encoding: str
    objective: str
    pooler: str
    transform: bool
    tri_head: str
    margin: float
    learning_rate: float
    batch_size: int
    grad_accum: int
    epochs: int
    weight_decay: float
    warmup_ratio: float
    max_grad_norm: float
    max_length: int
    seed: int
    precision: str
    max_steps: int | None = None
    condition_only: bool = False
    sentences_only: bool = False


def resolve(options: TrainOptions) -> Hyper:
    if options.preset is not None and options.preset not in PRESETS:
        raise UserError(f"--preset {options.preset!r}: known presets: {', '.join(PRESETS)}")
    values = {**DEFAULTS, **PRESETS.get(options.preset or "", {})}
    values.update({k: v for k, v in asdict(options).items() if k in values and v is not None})
    hyper = Hyper(
        **values,
        max_steps=options.max_steps,
        condition_only=options.condition_only,
        sentences_only=options.sentences_only,
    )
    if hyper.pooler == "auto":
        hyper.pooler = model_pooling(resolve_model_path(hyper.model)) or "cls"
    for name in ("batch_size", "grad_accum", "epochs", "max_length"):
        if getattr(hyper, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if hyper.max_steps is not None and hyper.max_steps < 1:
        raise UserError("--max-steps must be at least 1")
    if hyper.learning_rate <= 0 or hyper.weight_decay < 0 or hyper.max_grad_norm < 0 or hyper.margin < 0:
        raise UserError("--lr must be positive; --weight-decay, --max-grad-norm and --margin not negative")
    if not 0 <= hyper.warmup_ratio < 1:
        raise UserError(f"--warmup-ratio {hyper.warmup_ratio}: must be in [0, 1)")
    if hyper.objective != "mse" and hyper.batch_size % 2:
        raise UserError(f"--batch-size {hyper.batch_size}: the Quad objective needs an even batch (pairs of rows)")
    if options.eval_batch_size < 1:
        raise UserError("--eval-batch-size must be at least 1")
    return hyper


def model_spec(hyper: Hyper) -> ModelSpec:
    spec = ModelSpec(
        encoding=hyper.encoding,
        pooler=hyper.pooler,
        transform=hyper.transform,
        tri_head=hyper.tri_head,
        condition_only=hyper.condition_only,
        sentences_only=hyper.sentences_only,
        max_length=hyper.max_length,
        base_model=hyper.model,
        objective=hyper.objective,
    )
    spec.check()
    return spec


@dataclass
class Splits:
    train: PairData
    validation: PairData | None
    test: PairData | None
    sources: dict[str, Path] = field(default_factory=dict)


def read_splits(options: TrainOptions) -> Splits:
    """--train, --validation and --test name one source each; a source with a `split` column gives its rows of
    that split, and the train source's `validation`/`test` rows stand in for a missing --validation/--test."""
    sources = {"train": options.train}
    train = read_csts(options.train, "train")
    parts: dict[str, PairData | None] = {}
    for split in ("validation", "test"):
        path = getattr(options, split)
        if path is None and "split" in train.table.column_names:
            whole = read_csts(options.train)
            if split in set(whole.column("split")):
                path = options.train
        if path is not None:
            sources[split] = path
        parts[split] = read_csts(path, split) if path is not None else None
    return Splits(train, parts["validation"], parts["test"], sources)


def _source_fingerprint(path: Path) -> str:
    if path.is_dir():
        return fingerprint([(p.name, file_fingerprint(p)) for p in sorted(path.glob(SHARD_GLOB))])
    return file_fingerprint(path)


def _model_fingerprint(name: str) -> str:
    """A local model folder by its files' names, sizes and times; a hub name by itself."""
    folder = Path(resolve_model_path(name))
    if not folder.is_dir():
        return name
    listing = [(str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))]
    return fingerprint(listing)


def plan(options: TrainOptions, hyper: Hyper, splits: Splits) -> StageRun:
    params = {
        **asdict(hyper),
        "min_label": options.min_label,
        "max_label": options.max_label,
        "splits": {name: str(path) for name, path in splits.sources.items()},
    }
    inputs = {name: _source_fingerprint(path) for name, path in splits.sources.items()}
    inputs["model"] = _model_fingerprint(hyper.model)
    return StageRun(STAGE, options.out, params, inputs)


def _check_out_folder(out: Path) -> None:
    """A run starts its folder afresh, so never point it at a folder that is not a train output."""
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    record = read_record(out)
    if record is not None and record.get("stage") != STAGE:
        raise UserError(f"--out {out}: holds the output of stage {record.get('stage')!r}; choose another folder")
    if record is None and not (out / STARTED).is_file() and any(out.iterdir()):
        raise UserError(f"--out {out}: exists and is not a train output folder; choose a new or empty folder")


def quad_loss(scores: torch.Tensor, margin: float) -> torch.Tensor:
    """Rows are [high-condition rows; low-condition rows] of the same pairs. With distance 1 - cos as in the
    reference code, max(margin + d(p1, p2) - d(n1, n2), 0) = max(margin + cos(n1, n2) - cos(p1, p2), 0)."""
    high, low = scores.chunk(2)
    return torch.clamp_min(margin + low - high, 0).mean()


def batch_loss(scores: torch.Tensor, targets: torch.Tensor, objective: str, margin: float) -> torch.Tensor:
    mse = torch.nn.functional.mse_loss(scores, targets)
    if objective == "mse":
        return mse
    quad = quad_loss(scores, margin)
    return quad if objective == "quad" else quad + mse


def _batches(order: np.ndarray, pairs: np.ndarray | None, batch_size: int) -> list[np.ndarray]:
    """Row indices per batch, in `order` (of rows, or of pairs laid out [highs; lows] for Quad)."""
    if pairs is None:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    per_batch = batch_size // 2
    chunks = (order[i : i + per_batch] for i in range(0, len(order), per_batch))
    return [np.concatenate([pairs[chunk, 0], pairs[chunk, 1]]) for chunk in chunks]


def epoch_batches(n_rows: int, pairs: np.ndarray | None, batch_size: int, seed: int) -> list[np.ndarray]:
    """A seeded random order of the training rows (whole pairs for Quad), batched."""
    count = n_rows if pairs is None else len(pairs)
    return _batches(np.random.default_rng(seed).permutation(count), pairs, batch_size)


def probe_batches(n_rows: int, pairs: np.ndarray | None, batch_size: int, seed: int) -> list[np.ndarray]:
    """A fixed subset of the training rows (whole pairs for Quad), batched as training batches them, whose
    loss is measured before training and after each epoch: a like-for-like check that training learns."""
    count = n_rows if pairs is None else len(pairs)
    limit = PROBE_ROWS if pairs is None else PROBE_ROWS // 2
    chosen = np.sort(np.random.default_rng(seed).permutation(count)[:limit])
    return _batches(chosen, pairs, batch_size)


def probe_loss(
    model: CstsModel,
    tokenized: Tokenized,
    batches: list[np.ndarray],
    targets: torch.Tensor,
    hyper: Hyper,
    device: torch.device,
    dtype: torch.dtype | None,
) -> float:
    """The training objective over `batches` in eval mode (no dropout), weighted by batch size."""
    model.eval()
    total, weight = 0.0, 0
    with torch.inference_mode(), precision_context(device, dtype):
        for rows in batches:
            batch = {k: v.to(device) for k, v in model.collate(tokenized, rows).items()}
            loss = batch_loss(model(**batch), targets[rows].to(device), hyper.objective, hyper.margin)
            total += float(loss) * len(rows)
            weight += len(rows)
    model.train()
    return total / max(weight, 1)


def _optimizer(model: CstsModel, hyper: Hyper) -> torch.optim.Optimizer:
    """AdamW; biases and normalisation weights (1-d parameters) get no weight decay, as in HF Trainer."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": hyper.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=hyper.learning_rate)


def _set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _save_checkpoint(path: Path, state: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def _better(score: float | None, best: float | None) -> bool:
    if best is None:
        return True
    return score is not None and score > best


def run(options: TrainOptions, force: bool = False) -> dict:
    """Train into `options.out`; returns the stage record (or an up-to-date marker)."""
    hyper = resolve(options)
    spec = model_spec(hyper)
    splits = read_splits(options)
    pairs = quad_pairs(splits.train) if hyper.objective != "mse" else None
    if not splits.train.labelled:
        raise UserError(f"{splits.train.source}: the training split has no labels")
    labelled = [d for d in (splits.train, splits.validation) if d is not None]
    scale = label_scale(labelled, options.min_label, options.max_label)
    spec.label_low, spec.label_high = scale.low, scale.high
    stage = plan(options, hyper, splits)
    if stage.is_done() and not force:
        if options.metrics_out is not None:
            write_metrics(options.metrics_out, read_record(stage.folder)["metrics"])
        return {"status": "up-to-date", "folder": str(stage.folder)}
    _check_out_folder(options.out)
    device = resolve_device(options.device)
    dtype = half_precision(device, hyper.precision)
    _set_seed(hyper.seed)
    model = load_model(hyper.model, spec).to(device)
    model.train()
    resumed = stage.begin(force=force)

    tokenized = model.tokenize(splits.train)
    targets = torch.tensor(scale(splits.train.labels()), dtype=torch.float32)
    validation_tokens = model.tokenize(splits.validation) if splits.validation is not None else None
    probe = probe_batches(len(splits.train), pairs, hyper.batch_size, hyper.seed)

    batches_per_epoch = len(epoch_batches(len(splits.train), pairs, hyper.batch_size, 0))
    steps_per_epoch = math.ceil(batches_per_epoch / hyper.grad_accum)
    total_steps = steps_per_epoch * hyper.epochs
    if hyper.max_steps is not None:
        total_steps = min(total_steps, hyper.max_steps)
    from transformers import get_linear_schedule_with_warmup

    optimizer = _optimizer(model, hyper)
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(hyper.warmup_ratio * total_steps), total_steps)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)

    checkpoint = stage.folder / CHECKPOINT
    state = {"epoch": 0, "step": 0, "history": [], "best": None, "best_epoch": None, "seconds": 0.0, "rows": 0}
    if resumed and checkpoint.is_file():
        saved = torch.load(checkpoint, map_location=device, weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        scaler.load_state_dict(saved["scaler"])
        state = saved["state"]
        log.info("train: resuming after epoch %d (step %d)", state["epoch"], state["step"])
    else:
        state["initial_probe_loss"] = probe_loss(model, tokenized, probe, targets, hyper, device, dtype)

    epoch = state["epoch"]
    while epoch < hyper.epochs and state["step"] < total_steps:
        started, losses, rows_seen = time.perf_counter(), [], 0
        batches = epoch_batches(len(splits.train), pairs, hyper.batch_size, hyper.seed + epoch)
        optimizer.zero_grad(set_to_none=True)
        progress = tqdm(batches, desc=f"train epoch {epoch + 1}/{hyper.epochs}", unit="batch", dynamic_ncols=True)
        for index, rows in enumerate(progress):
            batch = {k: v.to(device, non_blocking=True) for k, v in model.collate(tokenized, rows).items()}
            with precision_context(device, dtype):
                scores = model(**batch)
            loss = batch_loss(scores, targets[rows].to(device), hyper.objective, hyper.margin)
            scaler.scale(loss / hyper.grad_accum).backward()
            losses.append(loss.detach().item())
            rows_seen += len(rows)
            if (index + 1) % hyper.grad_accum == 0 or index + 1 == len(batches):
                if hyper.max_grad_norm > 0:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), hyper.max_grad_norm)
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                state["step"] += 1
                progress.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}")
                if state["step"] >= total_steps:
                    break
        progress.close()
        seconds = time.perf_counter() - started
        state["seconds"] += seconds
        state["rows"] += rows_seen
        epoch += 1
        entry = {
            "epoch": epoch,
            "steps": state["step"],
            "train_loss": float(np.mean(losses)),
            "probe_loss": probe_loss(model, tokenized, probe, targets, hyper, device, dtype),
            "seconds": round(seconds, 3),
            "examples_per_second": round(rows_seen / max(seconds, 1e-9), 2),
        }
        if validation_tokens is not None:
            scores = predict(model, validation_tokens, device, options.eval_batch_size, dtype)
            labels = splits.validation.labels() if splits.validation.labelled else None
            entry["validation"] = correlations(scores, labels)
        state["history"].append(entry)
        selected = entry.get("validation", {}).get("spearman")
        log.info(
            "train: epoch %d loss %.4f probe %.4f validation spearman %s (%.1f ex/s)",
            epoch,
            entry["train_loss"],
            entry["probe_loss"],
            "-" if selected is None else f"{selected:.2f}",
            entry["examples_per_second"],
        )
        if validation_tokens is None or _better(selected, state["best"]):
            state["best"], state["best_epoch"] = selected, epoch
            model.save(stage.folder / "best")
        state["epoch"] = epoch
        _save_checkpoint(
            checkpoint,
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict(),
                "state": state,
            },
        )

    del model, optimizer
    best = load_model(str(stage.folder / "best")).to(device)
    evaluated = {"validation": splits.validation, "test": splits.test}
    evaluated = {name: data for name, data in evaluated.items() if data is not None} or {"train": splits.train}
    results = {}
    for name, data in evaluated.items():
        scores, metrics = score_split(best, data, device, options.eval_batch_size, dtype)
        results[name] = (data, scores, metrics)
    document = write_outputs(results, stage.folder / "metrics.json")
    if options.metrics_out is not None:
        write_metrics(options.metrics_out, document)
    checkpoint.unlink(missing_ok=True)
    counts = {
        "train_rows": len(splits.train),
        "train_pairs": None if pairs is None else len(pairs),
        **{f"{name}_rows": len(data) for name, data in evaluated.items() if name != "train"},
        "epochs": state["epoch"],
        "optimizer_steps": state["step"],
    }
    record = stage.finish(
        counts,
        metrics=document,
        split_metrics={name: metrics for name, (_, _, metrics) in results.items()},
        history=state["history"],
        initial_probe_loss=state.get("initial_probe_loss"),
        best_epoch=state["best_epoch"],
        label_range=[scale.low, scale.high],
        device=str(device),
        precision=str(dtype).removeprefix("torch.") if dtype is not None else "fp32",
        resumed=resumed,
        train_seconds=round(state["seconds"], 3),
        examples_per_second=round(state["rows"] / max(state["seconds"], 1e-9), 2),
    )
    write_json(stage.folder / "train_record.json", record)
    return record
