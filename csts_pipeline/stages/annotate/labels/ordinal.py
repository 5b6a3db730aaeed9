"""An ordinal rater model for 1-5 ratings: each item's true label, each worker's bias and noise, fitted by EM.

The model (an ordinal Dawid-Skene with two parameters per worker instead of a free 5 x 5 confusion matrix):
every item i has a true label t_i in 1..5, drawn from a shared prior; worker w answers y with probability

    P(y | t, w) = exp(-(y - t - b_w)^2 / (2 s_w^2)) / Z(t, b_w, s_w),   y in 1..5,

a Gaussian kernel around the true label shifted by the worker's bias b_w (lenient > 0, harsh < 0), with spread
s_w (noise), normalised over the five answers. A careful worker has a small s_w; as s_w grows the answers tend
to uniform, which is what a spammer gives, so one family covers careful, lenient, harsh and random raters. Two
parameters per worker, rather than Dawid-Skene's 20, are estimable from the 20-100 ratings a crowd worker
typically gives, and the order of the scale is built in (a 4 for a true 5 is a small error).

EM: the E-step gives each item a posterior over 1..5 from its ratings; the M-step sets the prior to the mean
posterior and picks each worker's (b_w, s_w) on a fixed grid (bias -2..2 by 0.1, noise 0.25..8 log-spaced)
maximising the expected log-likelihood plus a prior (MAP): bias ~ N(0, 1) and two pseudo-ratings of a typical
worker (b 0, s 1), so a worker with a handful of ratings is not judged on them alone. The grid makes the M-step
one matrix product for all workers, exact and free of step sizes.

A **language model** (a worker whose rows carry a distribution q over 1..5, `soft`) is estimated like anyone,
against the people and the hidden gold, with two differences. Its P(y | t) is a free 5 x 5 confusion (with
FREE_PSEUDO pseudo-answers per true label spread as its answers overall), estimated from its most likely digits:
it answers every item, enough for 20 cells, and its errors repeat (one answer favoured, a point off on a kind
of condition), a pattern the two-parameter kernel smears into noise. And each answer enters the item's
posterior as the expected likelihood under its distribution, sum_y q(y) P(y | t): a sure answer weighs as a
rating, an unsure one less, a flat one nothing. It starts uninformative (the widest kernel), so it earns its
weight against the people; labels/model_workers.py fits it per kind of condition, judges its reliability and
leaves out what it has not earned (docs/annotate.md, "Models in the loop").

A worker's **reliability** is the correlation between the true label and the worker's answer under the fitted
P(y | t, w), with the true label uniform on 1..5: about 0.95 for a careful worker, 0.8-0.9 for one shifted by a
point (the scale's ends clip the shift), 0 for uniform answers."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

SCALE = np.arange(1, 6, dtype=np.float64)
BIAS_GRID = np.round(np.arange(-2.0, 2.0001, 0.1), 2)
NOISE_GRID = np.geomspace(0.25, 8.0, 24)
BIAS_PRIOR_SD = 1.0
PSEUDO_RATINGS = 2.0
TYPICAL = (0.0, 1.0)  # bias and noise of the pseudo-ratings
INTERVAL_MASS = 0.9
FREE_PSEUDO = 2.0  # a model worker's confusion: pseudo-answers per true label, spread as its answers overall


def response(bias: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """P(y | t) for each (bias, noise): array [..., t, y] over the scale 1..5."""
    bias, noise = np.asarray(bias, np.float64), np.asarray(noise, np.float64)
    centre = SCALE[:, None] + bias[..., None, None]  # [..., t, 1]
    kernel = np.exp(-((SCALE[None, :] - centre) ** 2) / (2 * noise[..., None, None] ** 2))
    return kernel / kernel.sum(axis=-1, keepdims=True)


def reliability(table: np.ndarray) -> np.ndarray:
    """Correlation of t and y under P(y | t) [..., t, y] with t uniform on the scale."""
    joint = table / len(SCALE)
    t, y = SCALE[:, None], SCALE[None, :]
    mean_t, mean_y = SCALE.mean(), (joint * y).sum(axis=(-2, -1))
    cov = (joint * t * y).sum(axis=(-2, -1)) - mean_t * mean_y
    var_y = (joint * y**2).sum(axis=(-2, -1)) - mean_y**2
    return cov / np.sqrt(SCALE.var() * np.maximum(var_y, 1e-12))


@cache
def _grid() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The grid's (bias, noise) points, their log P(y | t) flattened to 25 cells, and their log prior."""
    bias, noise = (g.reshape(-1) for g in np.meshgrid(BIAS_GRID, NOISE_GRID, indexing="ij"))
    log_table = np.log(response(bias, noise)).reshape(len(bias), -1)
    log_prior = -0.5 * (bias / BIAS_PRIOR_SD) ** 2
    return bias, noise, log_table, log_prior


@dataclass
class OrdinalFit:
    """The fitted model: per item a posterior over 1..5 (rows of zeros-information items equal the prior), per
    worker (in `workers` order) bias, noise and reliability."""

    posterior: np.ndarray
    prior: np.ndarray
    workers: np.ndarray
    bias: np.ndarray
    noise: np.ndarray
    reliability: np.ndarray
    answers: np.ndarray
    iterations: int
    converged: bool
    table: np.ndarray | None = None  # P(y | t) per worker [workers, t, y]: the kernel, or a model's confusion

    @property
    def label(self) -> np.ndarray:
        """The point label: the posterior mean (a float on 1-5, as the mean of ratings)."""
        return self.posterior @ SCALE

    def interval(self, mass: float = INTERVAL_MASS) -> tuple[np.ndarray, np.ndarray]:
        """Per item the run of labels lo..hi around the most probable one; the runs of all items hold `mass` of
        their posterior mass on average (credible_interval)."""
        return credible_interval(self.posterior, mass)

    def p_higher(self, high: np.ndarray, low: np.ndarray) -> np.ndarray:
        """P(true label of item `high` > that of item `low`), the two posteriors taken as independent."""
        below = np.cumsum(self.posterior[low], axis=1) - self.posterior[low]  # P(low < k) for k = 1..5
        return (self.posterior[high] * below).sum(axis=1)


def credible_interval(posterior: np.ndarray, mass: float) -> tuple[np.ndarray, np.ndarray]:
    """Per posterior row, the run of labels lo..hi spanning its most probable label and every label whose
    probability reaches a threshold shared by the batch, the threshold set so that the runs hold, on average
    over the rows, the posterior mass closest to `mass`. Why shared: on five discrete labels one item's run
    cannot hold 0.9 when its mode alone holds 0.97, so per-item runs held 95-97% on sharp crowds (a crowd with a
    good model, or five ratings an item) and covered the truth as often: too wide. Spending the batch's mass
    where the posteriors are wide keeps the coverage of a calibrated posterior at `mass` (85-95% on crowds of
    2-5 ratings an item, with and without model raters: tests/annotate/test_model_workers.py)."""
    n, k = posterior.shape
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    mode = np.argmax(posterior, axis=1)
    others = posterior.copy()
    others[np.arange(n), mode] = -1.0
    ordered = np.sort(others.reshape(-1))[::-1]
    ordered = ordered[ordered >= 0]
    held = (posterior[np.arange(n), mode].sum() + np.concatenate([[0.0], np.cumsum(ordered)])) / n
    extra = int(np.argmin(np.where(held <= mass + 1e-12, mass - held, np.inf)))  # cells beyond the modes
    extra = extra if held[extra] <= mass + 1e-12 else 0
    threshold = ordered[extra - 1] if extra > 0 else np.inf
    take = (posterior >= threshold) | (np.arange(k)[None, :] == mode[:, None])
    labels = np.where(take, np.arange(k)[None, :], -1)
    low = np.where(take, np.arange(k)[None, :], k).min(axis=1)
    return low + 1, labels.max(axis=1) + 1


def answer_matrix(rating: np.ndarray, soft: np.ndarray | None) -> np.ndarray:
    """Each answer as a distribution over 1..5, [answers, y]: one-hot for a hard rating, the row of `soft` where
    it has one (rows of nan in `soft` mark hard ratings)."""
    hard = np.eye(len(SCALE))[np.clip(np.rint(rating).astype(np.int64), 1, len(SCALE)) - 1]
    if soft is None:
        return hard
    soft = np.asarray(soft, np.float64)
    has = ~np.isnan(soft).any(axis=1)
    rows = np.clip(np.nan_to_num(soft[has]), 0.0, None)
    hard[has] = rows / np.maximum(rows.sum(axis=1, keepdims=True), 1e-12)
    return hard


def answer_likelihood(answers: np.ndarray, code: np.ndarray, table: np.ndarray) -> np.ndarray:
    """[answers, t]: sum_y q(y) P(y | t) of each answer's distribution q under its worker's table[worker, t, y]."""
    return np.einsum("ry,rty->rt", answers, table[code])


def item_posterior(
    item: np.ndarray, code: np.ndarray, answers: np.ndarray, table: np.ndarray, prior: np.ndarray, n_items: int
) -> np.ndarray:
    """E-step: per item, the posterior over 1..5 given its answers ([answers, y], answer_matrix); table[worker,
    t, y] holds P(y | t)."""
    per_rating = np.log(np.maximum(answer_likelihood(answers, code, table), 1e-300))  # [answers, t]
    log_post = np.tile(np.log(prior), (n_items, 1))
    for t in range(len(SCALE)):
        log_post[:, t] += np.bincount(item, weights=per_rating[:, t], minlength=n_items)
    log_post -= log_post.max(axis=1, keepdims=True)
    post = np.exp(log_post)
    return post / post.sum(axis=1, keepdims=True)


def worker_counts(posterior: np.ndarray, item: np.ndarray, code: np.ndarray, answers: np.ndarray, n: int) -> np.ndarray:
    """Expected counts[worker, t, y]: each answer's distribution over y (one-hot for a rating, q for a model's)
    spread over the true labels by its item's posterior, so a worker's table is its mean answer given t."""
    counts = np.zeros((n, len(SCALE), len(SCALE)))
    np.add.at(counts, code, posterior[item][:, :, None] * answers[:, None, :])
    return counts


def best_parameters(counts: np.ndarray) -> np.ndarray:
    """M-step: the grid point maximising each worker's expected log-likelihood plus the prior (pseudo-ratings of
    a typical worker spread evenly over the true labels, and the bias prior)."""
    _, _, log_table, log_prior = _grid()
    pseudo = PSEUDO_RATINGS * response(np.array(TYPICAL[0]), np.array(TYPICAL[1])) / len(SCALE)
    flat = (counts + pseudo).reshape(len(counts), len(SCALE) ** 2)
    return np.argmax(flat @ log_table.T + log_prior, axis=1)


def fit(
    item: np.ndarray,
    worker: np.ndarray,
    rating: np.ndarray,
    n_items: int,
    max_iter: int = 200,
    tol: float = 1e-6,
    known: np.ndarray | None = None,
    soft: np.ndarray | None = None,
) -> OrdinalFit:
    """Fit the model by EM to ratings (`item` indexes 0..n_items-1, `worker` ids, `rating` integers 1-5).
    `known` (per item, 0 or a true label 1-5) fixes the posterior of control items with a known answer (hidden
    gold) in every E-step, so they anchor the workers' bias and noise; they stay out of the label prior.
    `soft` ([ratings, 5], rows of nan for hard ratings) gives a model worker's distribution for its rows: such a
    worker gets a free confusion (free_tables), starts uninformative and earns its weight against the others."""
    workers, code = np.unique(np.asarray(worker).astype(str), return_inverse=True)
    rating = np.asarray(rating, np.float64)
    hard = np.ones(len(rating), bool) if soft is None else np.isnan(np.asarray(soft, np.float64)).any(axis=1)
    checked = rating[hard]
    if len(checked) and (checked.min() < 1 or checked.max() > 5 or (checked != np.round(checked)).any()):
        raise ValueError("ratings must be integers from 1 to 5")
    answers = answer_matrix(rating, soft)
    digits = np.eye(len(SCALE))[np.argmax(answers, axis=1)]  # what the tables are estimated from
    bias_grid, noise_grid, log_grid, _ = _grid()
    start = int(np.argmin(np.abs(bias_grid - TYPICAL[0]) + np.abs(np.log(noise_grid / TYPICAL[1]))))
    flat = int(np.argmin(np.abs(bias_grid) - noise_grid))  # bias 0, the widest noise: answers carry nothing
    free = np.bincount(code, weights=~hard, minlength=len(workers)) > 0  # model workers: a free confusion
    choice = np.where(free, flat, start)
    table = np.exp(log_grid[choice].reshape(len(workers), len(SCALE), len(SCALE)))
    prior = np.full(len(SCALE), 1 / len(SCALE))
    posterior = np.tile(prior, (n_items, 1))
    converged, iterations = False, 0
    while iterations < max_iter:
        iterations += 1
        updated = item_posterior(item, code, answers, table, prior, n_items)
        answered = np.bincount(item, minlength=n_items) > 0
        if known is not None:
            fixed = np.flatnonzero(known > 0)
            updated[fixed] = np.eye(len(SCALE))[known[fixed].astype(np.int64) - 1]
            answered &= known <= 0
        prior = (updated[answered].sum(axis=0) + 1) / (answered.sum() + len(SCALE))
        counts = worker_counts(updated, item, code, digits, len(workers))
        choice = best_parameters(counts)
        table = free_tables(counts, np.exp(log_grid[choice].reshape(len(workers), len(SCALE), len(SCALE))), free)
        change = float(np.abs(updated - posterior).max()) if n_items else 0.0
        posterior = updated
        if change < tol:
            converged = True
            break
    bias, noise = bias_grid[choice], noise_grid[choice]
    return OrdinalFit(
        posterior=posterior,
        prior=prior,
        workers=workers,
        bias=bias,
        noise=noise,
        reliability=reliability(table),
        answers=np.bincount(code, minlength=len(workers)),
        iterations=iterations,
        converged=converged,
        table=table,
    )


def free_tables(counts: np.ndarray, kernel: np.ndarray, free: np.ndarray) -> np.ndarray:
    """The workers' P(y | t): the fitted kernel, and for the `free` workers (language models, who answer every
    item) a free 5 x 5 confusion from their expected counts with FREE_PSEUDO answers per true label spread as
    their answers overall (whatever the truth), so a row with little evidence says nothing about t. Why free: a
    model's errors repeat (one answer favoured, a point off on one kind of condition), a pattern a two-parameter
    kernel smears into noise. Why not its kernel for the pseudo-answers, as before: a model that says 5 for
    every item fitted a kernel two points up, whose pseudo-answers made a 5 evidence against a true 1, which
    pulled the labels up EM round by EM round (coverage 0.45 with one human rating an item)."""
    table = kernel.copy()
    marginal = counts[free].sum(axis=1, keepdims=True)  # [free workers, 1, y]: its answers whatever the truth
    marginal = marginal / np.maximum(marginal.sum(axis=2, keepdims=True), 1e-12)
    smoothed = counts[free] + FREE_PSEUDO * marginal
    table[free] = smoothed / smoothed.sum(axis=2, keepdims=True)
    return table
