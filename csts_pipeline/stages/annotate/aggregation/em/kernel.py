"""The people's kernel in the ordinal rater model (aggregation/em/ordinal.py): P(y | t) a Gaussian around the true label
shifted by the worker's bias, with their noise as its spread, normalised over the five answers; the grid of
(bias, noise) the M-step picks from, and its prior. A worker's table grows from the kernel with their own answers
(model_tables.grown_tables)."""

from __future__ import annotations

from functools import cache, lru_cache

import numpy as np

from csts_pipeline.stages.annotate.aggregation import thresholds
from csts_pipeline.stages.annotate.aggregation.em.em_sums import SCALE

BIAS_GRID = np.round(np.arange(-2.0, 2.0001, 0.1), 2)
NOISE_GRID = np.geomspace(0.25, 8.0, 24)
TYPICAL = (0.0, 1.0)  # bias and noise of the pseudo-ratings


def response(bias: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """P(y | t) for each (bias, noise): array [..., t, y] over the scale 1..5."""
    bias, noise = np.asarray(bias, np.float64), np.asarray(noise, np.float64)
    centre = SCALE[:, None] + bias[..., None, None]  # [..., t, 1]
    kernel = np.exp(-((SCALE[None, :] - centre) ** 2) / (2 * noise[..., None, None] ** 2))
    return kernel / kernel.sum(axis=-1, keepdims=True)


def reliability(table: np.ndarray, prior: np.ndarray | None = None) -> np.ndarray:
    """A worker's reliability: the correlation of t and y under P(y | t) [..., t, y] with t drawn from `prior`
    (the batch's labels; uniform on the scale when None): about 0.95 for a careful worker, 0.8-0.9 for one
    shifted by a point, 0 for uniform answers. Under the batch's prior it is comparable with the worker's
    correlation with the truth on this batch's items."""
    p_t = np.full(len(SCALE), 1 / len(SCALE)) if prior is None else np.asarray(prior, np.float64)
    joint = table * p_t[:, None]
    t, y = SCALE[:, None], SCALE[None, :]
    mean_t, mean_y = p_t @ SCALE, (joint * y).sum(axis=(-2, -1))
    var_t = p_t @ SCALE**2 - mean_t**2
    cov = (joint * t * y).sum(axis=(-2, -1)) - mean_t * mean_y
    var_y = (joint * y**2).sum(axis=(-2, -1)) - mean_y**2
    return cov / np.sqrt(var_t * np.maximum(var_y, 1e-12))


@cache
def grid() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The grid's (bias, noise) points, their log P(y | t) flattened to 25 cells, and their log prior."""
    bias, noise = (g.reshape(-1) for g in np.meshgrid(BIAS_GRID, NOISE_GRID, indexing="ij"))
    log_table = np.log(response(bias, noise)).reshape(len(bias), -1)
    log_prior = -0.5 * (bias / thresholds.BIAS_PRIOR_SD) ** 2
    return bias, noise, log_table, log_prior


def kernel_tables(bias: np.ndarray, noise: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """[g, worker, t, y]: each worker's kernel with its bias moved by each shift."""
    return response(bias[None, :] + shifts[:, None], np.broadcast_to(noise, (len(shifts), len(noise))))


def grid_tables(choice: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """[g, worker, t, y]: kernel_tables of each worker's grid point `choice`, read from the whole grid's tables,
    made once per set of shifts (the same numbers: each is the kernel of its point's bias and noise)."""
    return _grid_tables(tuple(float(s) for s in shifts))[:, choice]


@lru_cache(maxsize=8)
def _grid_tables(shifts: tuple[float, ...]) -> np.ndarray:
    bias, noise, _, _ = grid()
    return kernel_tables(bias, noise, np.array(shifts))


def best_parameters(counts: np.ndarray, shifts: np.ndarray, pinned: np.ndarray | None = None) -> np.ndarray:
    """M-step: the grid point maximising each worker's expected log-likelihood (counts[worker, g, t, y], each
    node's kernel moved by its shift) plus the prior (pseudo-ratings of a typical worker spread evenly over the
    true labels, unshifted, and the bias prior). `pinned` (per worker, a noise or nan): such a worker's noise
    is held there and its bias alone chosen.

    A grid point (b, s) scores -(y - t - shift - b)^2 / (2 s^2) - log Z(t + shift + b, s) summed over the counts,
    so each worker is read by three moments of d = y - t - shift (the sum of its counts, of d, of d^2) and its
    answers per (g, t), against log Z: [worker, 4 + g * t] by [4 + g * t, point] (a column of ones for the
    prior), a fifth of the work of scoring every cell, taken SCORED_AT_ONCE workers at a time so the scores stay
    in the cache."""
    key = tuple(float(s) for s in shifts)
    weights = _scored_grid(key)
    flat = counts.reshape(len(counts), len(shifts) * len(SCALE) ** 2)  # [worker, (g, t, y)]
    features = np.empty((len(counts), weights.shape[0]))
    features[:, 0] = 1.0
    features[:, 1:4] = flat @ _moments(key)
    features[:, 4:] = counts.sum(axis=3).reshape(len(counts), len(shifts) * len(SCALE))
    allowed = None
    if pinned is not None and not np.isnan(pinned).all():
        _, noise, _, _ = grid()
        allowed = np.isnan(pinned)[:, None] | np.isclose(noise[None, :], pinned[:, None])
    choice = np.zeros(len(counts), np.int64)
    for start in range(0, len(counts), SCORED_AT_ONCE):
        score = features[start : start + SCORED_AT_ONCE] @ weights
        if allowed is not None:
            score[~allowed[start : start + SCORED_AT_ONCE]] = -np.inf
        choice[start : start + SCORED_AT_ONCE] = np.argmax(score, axis=1)
    return choice


SCORED_AT_ONCE = 256  # best_parameters' workers per product: [256, points] of scores fit the cache


@lru_cache(maxsize=32)
def _moments(shifts: tuple[float, ...]) -> np.ndarray:
    """[(g, t, y), 3]: per cell 1, d and d^2, d = y - t - shift_g (best_parameters' moments)."""
    d = (SCALE[None, None, :] - SCALE[None, :, None] - np.array(shifts)[:, None, None]).reshape(-1)
    return np.ascontiguousarray(np.stack([np.ones_like(d), d, d**2], axis=1))


@lru_cache(maxsize=32)
def _scored_grid(shifts: tuple[float, ...]) -> np.ndarray:
    """For best_parameters, once per set of shifts (EM keeps one for hundreds of iterations): per grid point the
    weight of a column of ones (the pseudo-ratings' log-likelihood plus the bias prior), of the three moments and
    of the answers per (g, t): [4 + g * t, point]."""
    bias, noise, log_table, log_prior = grid()
    inverse = 1 / (2 * noise**2)
    centre = (SCALE[None, :] + np.array(shifts)[:, None]).reshape(-1)[:, None] + bias[None, :]  # [g * t, point]
    exponent = -((SCALE[None, None, :] - centre[:, :, None]) ** 2) * inverse[None, :, None]  # [g * t, point, y]
    top = exponent.max(axis=2)
    log_z = np.log(np.exp(exponent - top[:, :, None]).sum(axis=2)) + top
    pseudo = thresholds.PSEUDO_RATINGS * response(np.array(TYPICAL[0]), np.array(TYPICAL[1])) / len(SCALE)
    constant = pseudo.reshape(-1) @ log_table.T + log_prior
    rows = [constant, -(bias**2) * inverse, 2 * bias * inverse, -inverse]  # ones, sum of counts, of d, of d^2
    return np.ascontiguousarray(np.concatenate([np.stack(rows), -log_z]))


def pinned_noise(target: float) -> float:
    """The noise of NOISE_GRID whose unbiased kernel's reliability is nearest `target`."""
    return float(NOISE_GRID[np.argmin(np.abs(reliability(response(np.zeros_like(NOISE_GRID), NOISE_GRID)) - target))])
