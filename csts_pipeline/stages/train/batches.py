"""Batches and losses of the training loop: the seeded batch order (whole pairs for the Quad objective), the
fixed probe batches, the step count and the MSE / Quad / Quad+MSE losses."""

from __future__ import annotations

import math

import numpy as np
import torch

from csts_pipeline.pipeline.manifest import TrainConfig

PROBE_ROWS = 256  # training rows whose loss is measured before training and after each epoch


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


def total_steps(config: TrainConfig, n_rows: int, pairs: np.ndarray | None) -> int:
    """Optimizer steps of the whole run: epochs x ceil(batches / accumulation), capped by --max-steps."""
    batches_per_epoch = len(epoch_batches(n_rows, pairs, config.batch_size, 0))
    steps = math.ceil(batches_per_epoch / config.grad_accum) * config.epochs
    return steps if config.max_steps is None else min(steps, config.max_steps)
