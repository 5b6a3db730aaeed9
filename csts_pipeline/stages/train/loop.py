"""The training loop of `train` (stages.train.train): the job (model, tokenized data, AdamW, linear warmup schedule,
gradient scaler), one epoch at a time with evaluation after each, the best epoch kept in `best/`, and the
checkpoint after each epoch (stages.train.checkpoint) that an interrupted run resumes from."""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from csts_pipeline.pipeline.manifest import TrainConfig
from csts_pipeline.stages.train.batches import batch_loss, epoch_batches, probe_batches, total_steps
from csts_pipeline.stages.train.checkpoint import load_checkpoint, restore_rng, rng_states, save_checkpoint
from csts_pipeline.stages.train.data import LabelScale, PairData, QuadPairing, quad_pairs
from csts_pipeline.stages.train.models import CstsModel, Tokenized
from csts_pipeline.stages.train.scoring import correlations, precision_context, predict
from csts_pipeline.stages.train.splits import Splits

log = logging.getLogger(__name__)
CHECKPOINT = "checkpoint.safetensors"


@dataclass
class TrainJob:
    """What the training loop works on: the model, its tokenized data and its optimizer, schedule and scaler."""

    config: TrainConfig
    model: CstsModel
    device: torch.device
    dtype: torch.dtype | None
    n_rows: int
    pairing: QuadPairing | None
    tokenized: Tokenized
    targets: torch.Tensor
    validation: PairData | None
    validation_tokens: Tokenized | None
    label_range: tuple[float, float]
    probe: list[np.ndarray]
    total_steps: int
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler

    @property
    def pairs(self) -> np.ndarray | None:
        return None if self.pairing is None else self.pairing.pairs


def probe_loss(job: TrainJob) -> float:
    """The training objective over the probe batches in eval mode (no dropout), weighted by batch size."""
    model, config = job.model, job.config
    model.eval()
    total, weight = 0.0, 0
    with torch.inference_mode(), precision_context(job.device, job.dtype):
        for rows in job.probe:
            batch = {k: v.to(job.device) for k, v in model.collate(job.tokenized, rows).items()}
            loss = batch_loss(model(**batch), job.targets[rows].to(job.device), config.objective, config.margin)
            total += float(loss) * len(rows)
            weight += len(rows)
    model.train()
    return total / max(weight, 1)


def _optimizer(model: CstsModel, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW; biases and normalisation weights (1-d parameters) get no weight decay, as in HF Trainer."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.learning_rate)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pair_rows(train: PairData, config: TrainConfig) -> QuadPairing | None:
    """The Quad objective's (high, low) pairs, with what pairing found logged; None for MSE."""
    if config.objective == "mse":
        return None
    pairing = quad_pairs(train, strict=config.strict_pairs)
    log.info(
        "train: %d Quad pairs; %d tied (trained on), %d where the labels contradict condition_type, "
        "%d sentence pair(s) without two rows dropped (%d rows)",
        len(pairing.pairs),
        pairing.tied,
        pairing.contradicted,
        pairing.dropped_groups,
        pairing.dropped_rows,
    )
    if pairing.dropped_groups:
        log.warning("train: %d sentence pair(s) without exactly two rows dropped", pairing.dropped_groups)
    return pairing


def build_job(
    config: TrainConfig,
    model: CstsModel,
    *,
    splits: Splits,
    scale: LabelScale,
    device: torch.device,
    dtype: torch.dtype | None,
) -> TrainJob:
    """Tokenize the data once and set up AdamW, the linear warmup schedule and the (fp16) gradient scaler."""
    from transformers import get_linear_schedule_with_warmup

    model.train()
    pairing = pair_rows(splits.train, config)
    pairs = None if pairing is None else pairing.pairs
    steps = total_steps(config, len(splits.train), pairs)
    optimizer = _optimizer(model, config)
    return TrainJob(
        config=config,
        model=model,
        device=device,
        dtype=dtype,
        n_rows=len(splits.train),
        pairing=pairing,
        tokenized=model.tokenize(splits.train),
        targets=torch.tensor(scale(splits.train.labels()), dtype=torch.float32),
        validation=splits.validation,
        validation_tokens=model.tokenize(splits.validation) if splits.validation is not None else None,
        label_range=(scale.low, scale.high),
        probe=probe_batches(len(splits.train), pairs, config.batch_size, config.seed),
        total_steps=steps,
        optimizer=optimizer,
        scheduler=get_linear_schedule_with_warmup(optimizer, math.ceil(config.warmup_ratio * steps), steps),
        scaler=torch.amp.GradScaler(device.type, enabled=dtype == torch.float16),
    )


# --- checkpoint / resume ------------------------------------------------------------------------------------------


def _save_checkpoint(path: Path, content: dict) -> None:
    """The one place the loop writes its checkpoint (tests interrupt a run here)."""
    save_checkpoint(path, content)


def checkpoint_content(job: TrainJob, progress: dict) -> dict:
    """What a resume needs: weights, optimizer, schedule, scaler, RNG states and the run's progress so far."""
    return {
        "model": job.model.state_dict(),
        "optimizer": job.optimizer.state_dict(),
        "scheduler": job.scheduler.state_dict(),
        "scaler": job.scaler.state_dict(),
        "rng": rng_states(),
        "state": progress,
    }


def start_or_resume(job: TrainJob, checkpoint: Path, resumed: bool) -> dict:
    """The run's progress: restored from the checkpoint of an interrupted run, else fresh (with the probe loss of
    the untrained model)."""
    if resumed and checkpoint.is_file():
        saved = load_checkpoint(checkpoint)  # on the CPU; load_state_dict moves weights and moments to the model
        job.model.load_state_dict(saved["model"])
        job.optimizer.load_state_dict(saved["optimizer"])
        job.scheduler.load_state_dict(saved["scheduler"])
        job.scaler.load_state_dict(saved["scaler"])
        restore_rng(saved["rng"])
        progress = saved["state"]
        log.info("train: resuming after epoch %d (step %d)", progress["epoch"], progress["step"])
        return progress
    progress = {"epoch": 0, "step": 0, "history": [], "best": None, "best_epoch": None, "seconds": 0.0, "rows": 0}
    progress["initial_probe_loss"] = probe_loss(job)
    return progress


# --- the loop -----------------------------------------------------------------------------------------------------


def _optimizer_step(job: TrainJob) -> None:
    """Clip (unless --max-grad-norm 0), step the optimizer through the scaler, advance the schedule."""
    if job.config.max_grad_norm > 0:
        job.scaler.unscale_(job.optimizer)
        torch.nn.utils.clip_grad_norm_(job.model.parameters(), job.config.max_grad_norm)
    job.scaler.step(job.optimizer)
    job.scaler.update()
    job.scheduler.step()
    job.optimizer.zero_grad(set_to_none=True)


def train_epoch(job: TrainJob, epoch: int, progress: dict) -> tuple[list[float], int]:
    """One pass over the training rows (stopping at the last step); returns the batch losses and rows seen."""
    config, model, device = job.config, job.model, job.device
    batches = epoch_batches(job.n_rows, job.pairs, config.batch_size, config.seed + epoch)
    losses, rows_seen = [], 0
    job.optimizer.zero_grad(set_to_none=True)
    bar = tqdm(batches, desc=f"train epoch {epoch + 1}/{config.epochs}", unit="batch", dynamic_ncols=True)
    for index, rows in enumerate(bar):
        batch = {k: v.to(device, non_blocking=True) for k, v in model.collate(job.tokenized, rows).items()}
        with precision_context(device, job.dtype):
            scores = model(**batch)
        loss = batch_loss(scores, job.targets[rows].to(device), config.objective, config.margin)
        job.scaler.scale(loss / config.grad_accum).backward()
        losses.append(loss.detach().item())
        rows_seen += len(rows)
        if (index + 1) % config.grad_accum == 0 or index + 1 == len(batches):
            _optimizer_step(job)
            progress["step"] += 1
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}")
            if progress["step"] >= job.total_steps:
                break
    bar.close()
    return losses, rows_seen


def epoch_entry(job: TrainJob, epoch: int, *, losses: list[float], rows_seen: int, seconds: float, step: int) -> dict:
    """The history entry of a finished epoch: losses, speed and, with a validation split, its correlations."""
    entry = {
        "epoch": epoch,
        "steps": step,
        "train_loss": float(np.mean(losses)),
        "probe_loss": probe_loss(job),
        "seconds": round(seconds, 3),
        "examples_per_second": round(rows_seen / max(seconds, 1e-9), 2),
    }
    if job.validation_tokens is not None:
        scores = predict(job.model, job.validation_tokens, job.device, job.config.eval_batch_size, job.dtype)
        labels = job.validation.labels() if job.validation.labelled else None
        entry["validation"] = correlations(scores, labels)
    selected = entry.get("validation", {}).get("spearman")
    log.info(
        "train: epoch %d loss %.4f probe %.4f validation spearman %s (%.1f ex/s)",
        epoch,
        entry["train_loss"],
        entry["probe_loss"],
        "-" if selected is None else f"{selected:.2f}",
        entry["examples_per_second"],
    )
    return entry


def _is_last(job: TrainJob, epoch: int, progress: dict) -> bool:
    return epoch >= job.config.epochs or progress["step"] >= job.total_steps


def _better(score: float | None, best: float | None) -> bool:
    if best is None:
        return True
    return score is not None and score > best


def train_epochs(job: TrainJob, progress: dict, folder: Path) -> None:
    """Train the remaining epochs; after each, keep the model in `best/` when it is the one selected so far (the
    best validation epoch, or with --select last the latest: the authors report the final epoch) and write the
    checkpoint a resume starts from."""
    epoch = progress["epoch"]
    while epoch < job.config.epochs and progress["step"] < job.total_steps:
        started = time.perf_counter()
        losses, rows_seen = train_epoch(job, epoch, progress)
        seconds = time.perf_counter() - started
        progress["seconds"] += seconds
        progress["rows"] += rows_seen
        epoch += 1
        entry = epoch_entry(job, epoch, losses=losses, rows_seen=rows_seen, seconds=seconds, step=progress["step"])
        progress["history"].append(entry)
        selected = entry.get("validation", {}).get("spearman")
        best = job.validation_tokens is None or _better(selected, progress["best"])
        if best:
            progress["best"], progress["best_epoch"] = selected, epoch
        keep = best if job.config.select == "best" else _is_last(job, epoch, progress)
        if keep:
            job.model.save(folder / "best")
        progress["epoch"] = epoch
        _save_checkpoint(folder / CHECKPOINT, checkpoint_content(job, progress))
