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
against the people and the hidden gold, with two differences. Its P(y | t) is a free 5 x 5 confusion
estimated from its most likely digits (free_tables says why). And each answer enters the item's posterior as
the expected likelihood under its distribution, sum_y q(y) P(y | t): a sure answer weighs as a rating, an
unsure one less, a flat one nothing. It starts uninformative (the widest kernel), so it earns its weight
against the people; labels/model_workers.py fits it per kind of condition, judges its reliability and leaves
out what it has not earned (docs/annotate.md, "Models in the loop").

**Shared ambiguity** (labels/shift.py): every rater of an item reads its true label t as t + u, u ~ N(0, sd^2)
the same for all of them, and the E-step integrates u out; the sd is chosen from a grid on the people's answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache

import numpy as np
from scipy import sparse

from csts_pipeline.stages.annotate.labels import shift
from csts_pipeline.stages.annotate.labels.interval import credible_interval

SCALE = np.arange(1, 6, dtype=np.float64)
BIAS_GRID = np.round(np.arange(-2.0, 2.0001, 0.1), 2)
NOISE_GRID = np.geomspace(0.25, 8.0, 24)
BIAS_PRIOR_SD = 1.0
PSEUDO_RATINGS = 2.0
TYPICAL = (0.0, 1.0)  # bias and noise of the pseudo-ratings
INTERVAL_MASS = 0.9
MAX_RANKING_ITER = 200  # EM iterations at each point of the spread's grid
FREE_PSEUDO = 2.0  # a model worker's confusion: pseudo-answers per true label, spread as its answers overall


def response(bias: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """P(y | t) for each (bias, noise): array [..., t, y] over the scale 1..5."""
    bias, noise = np.asarray(bias, np.float64), np.asarray(noise, np.float64)
    centre = SCALE[:, None] + bias[..., None, None]  # [..., t, 1]
    kernel = np.exp(-((SCALE[None, :] - centre) ** 2) / (2 * noise[..., None, None] ** 2))
    return kernel / kernel.sum(axis=-1, keepdims=True)


def reliability(table: np.ndarray) -> np.ndarray:
    """A worker's reliability: the correlation of t and y under P(y | t) [..., t, y] with t uniform on the scale
    (about 0.95 for a careful worker, 0.8-0.9 for one shifted by a point, 0 for uniform answers)."""
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
    ambiguity: float = 0.0  # the sd of the shared per-item shift every rater of an item feels
    log_likelihood: float = 0.0  # of the answers, under the fitted model (before the last M-step)
    spread_log_likelihoods: dict[float, float] = field(default_factory=dict)  # the people's, per spread tried

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
    """E-step without a shared shift: per item, the posterior over 1..5 given its answers ([answers, y],
    answer_matrix); table[worker, t, y] holds P(y | t)."""
    return joint_posterior(item, code, answers, table[None], prior, np.ones(1), n_items)[0].sum(axis=2)


def joint_posterior(
    item: np.ndarray,
    code: np.ndarray,
    answers: np.ndarray,
    tables: np.ndarray,
    prior: np.ndarray,
    weights: np.ndarray,
    n_items: int,
    layout: Layout | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """E-step: per item, the posterior [items, t, g] over its true label and the shared shift's node g, given its
    answers, and the log-likelihood of its answers; tables[g, worker, t, y] holds P(y | t + shift_g), `weights`
    the nodes' prior mass. `layout`: Layout.of these answers (Answers.layout keeps it across iterations)."""
    layout = layout or Layout.of(item, code, answers, tables.shape[1], n_items)
    columns = len(SCALE) * len(weights)
    cells = tables.transpose(1, 3, 2, 0).reshape(-1, columns)  # [worker * y, t * g]: a hard answer's likelihoods
    like = np.concatenate([cells, _soft_likelihood(answers[layout.soft], tables, code[layout.soft])])
    post = (layout.by_item @ np.log(np.maximum(like, 1e-300))).reshape(n_items, len(SCALE), len(weights))
    post += np.log(prior)[None, :, None] + np.log(weights)[None, None, :]
    top = post.max(axis=(1, 2), keepdims=True)
    post -= top  # in place from here: [items, t, g] arrays are the E-step's memory traffic
    np.exp(post, out=post)
    total = post.sum(axis=(1, 2), keepdims=True)
    post /= total
    return post, (np.log(total) + top).reshape(-1)


def _soft_likelihood(answers: np.ndarray, tables: np.ndarray, code: np.ndarray) -> np.ndarray:
    """[answers, t * g]: sum_y q(y) P(y | t + shift_g) of answers that are not one digit."""
    return np.einsum("ry,grty->rtg", answers, tables[:, code]).reshape(len(answers), len(SCALE) * len(tables))


def sum_by_index(index: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Rows of `values` [rows, columns] summed by their `index` (0..n-1): one sort and reduceat, not a
    per-column bincount or np.add.at, which were the fit's slowest lines."""
    out = np.zeros((n, values.shape[1]))
    if len(index) == 0:
        return out
    order = np.argsort(index, kind="stable")
    sorted_index = index[order]
    starts = np.flatnonzero(np.r_[True, sorted_index[1:] != sorted_index[:-1]])
    out[sorted_index[starts]] = np.add.reduceat(values[order], starts, axis=0)
    return out


def worker_counts(
    joint: np.ndarray,
    item: np.ndarray,
    code: np.ndarray,
    answers: np.ndarray,
    n: int,
    layout: Layout | None = None,
) -> np.ndarray:
    """Expected counts[worker, g, t, y]: each answer's distribution over y (its most likely digit, in `fit`)
    spread over the (true label, shift node) pairs by its item's joint posterior [items, t, g]. `layout`:
    Layout.of these answers (Answers.count_layout keeps it across iterations)."""
    layout = layout or Layout.of(item, code, answers, n, len(joint))
    cells = layout.by_cell @ joint.reshape(len(joint), -1)  # [worker * y, t * g]
    return cells.reshape(n, len(SCALE), len(SCALE), joint.shape[2]).transpose(0, 3, 2, 1)


@dataclass(frozen=True)
class Layout:
    """A batch's answers arranged for the two sums every EM iteration makes, as sparse matrices (built once per
    batch: the sort they need was the E- and M-steps' slowest line, redone every iteration):

    - by_item [items, worker * y + soft answers]: per item, its answers that are one digit y as their (worker,
      y) cell, and one column for each other answer (a model's distribution, `soft`), in the answers' order; the
      E-step's log-likelihood of an item is this times the cells' and the soft answers' log-likelihoods;
    - by_cell [worker * y, items]: per (worker, y), q(y) of each of the worker's answers, at its item; the
      M-step's expected counts are this times the items' posteriors.

    Each sum adds an item's (a cell's) terms in the answers' order, as sum_by_index did, so the fit is the same
    to the last bit (scipy's CSR product keeps the stored order and duplicate entries)."""

    by_item: sparse.csr_matrix
    by_cell: sparse.csr_matrix
    soft: np.ndarray  # the answers that are not one digit, in their order

    @staticmethod
    def of(item: np.ndarray, code: np.ndarray, answers: np.ndarray, n_workers: int, n_items: int) -> Layout:
        item, code = np.asarray(item, np.int64), np.asarray(code, np.int64)
        digit = np.argmax(answers, axis=1) if len(answers) else np.zeros(0, np.int64)
        one = np.zeros_like(answers)
        one[np.arange(len(answers)), digit] = 1.0
        soft = np.flatnonzero((answers != one).any(axis=1))
        column = code * len(SCALE) + digit
        column[soft] = n_workers * len(SCALE) + np.arange(len(soft))
        width = n_workers * len(SCALE) + len(soft)
        by_item = _rows_in_order(item, column, np.ones(len(item)), (n_items, width))
        row, y = np.nonzero(answers)
        by_cell = _rows_in_order(code[row] * len(SCALE) + y, item[row], answers[row, y], (width - len(soft), n_items))
        return Layout(by_item, by_cell, soft)


def _rows_in_order(row: np.ndarray, column: np.ndarray, value: np.ndarray, shape: tuple[int, int]) -> sparse.csr_matrix:
    """A CSR matrix of the entries (row, column, value), each row's entries kept in their order (duplicates
    too: the product adds them)."""
    order = np.argsort(row, kind="stable")
    pointer = np.zeros(shape[0] + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=shape[0]), out=pointer[1:])
    return sparse.csr_matrix((value[order], column[order], pointer), shape=shape)


def kernel_tables(bias: np.ndarray, noise: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """[g, worker, t, y]: each worker's kernel with its bias moved by each shift."""
    return response(bias[None, :] + shifts[:, None], np.broadcast_to(noise, (len(shifts), len(noise))))


def best_parameters(counts: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """M-step: the grid point maximising each worker's expected log-likelihood (counts[worker, g, t, y], each
    node's kernel moved by its shift) plus the prior (pseudo-ratings of a typical worker spread evenly over the
    true labels, unshifted, and the bias prior)."""
    moved, constant = _scored_grid(tuple(float(s) for s in shifts))
    flat = counts.reshape(len(counts), len(shifts) * len(SCALE) ** 2)  # [worker, g * cell]
    best = np.empty(len(flat), np.int64)
    for first in range(0, len(flat), BEST_BLOCK):  # a block of workers' scores at a time: it stays in cache
        scores = flat[first : first + BEST_BLOCK] @ moved
        scores += constant
        best[first : first + BEST_BLOCK] = np.argmax(scores, axis=1)
    return best


BEST_BLOCK = 512  # workers scored at once by best_parameters ([512, 984] float64: 4 MB)


@lru_cache(maxsize=32)
def _scored_grid(shifts: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """For best_parameters, once per set of shifts (EM keeps one for hundreds of iterations): the grid's log
    P(y | t + shift) as [g * cell, point], and per point the pseudo-ratings' log-likelihood plus the bias prior."""
    bias, noise, log_table, log_prior = _grid()
    moved = np.log(kernel_tables(bias, noise, np.array(shifts))).reshape(len(shifts), len(bias), -1)
    pseudo = PSEUDO_RATINGS * response(np.array(TYPICAL[0]), np.array(TYPICAL[1])) / len(SCALE)
    constant = pseudo.reshape(-1) @ log_table.T + log_prior
    return np.ascontiguousarray(moved.transpose(0, 2, 1).reshape(-1, len(bias))), constant[None, :]


@dataclass
class Answers:
    """A batch's answers as the EM reads them: item and worker indexes, each answer's distribution and most likely
    digit, which workers are models (a free confusion), and per item the true labels it may have (one for a
    control with a known answer)."""

    item: np.ndarray
    code: np.ndarray
    workers: np.ndarray
    answers: np.ndarray
    digits: np.ndarray
    free: np.ndarray
    allowed: np.ndarray
    answered: np.ndarray  # answered and not a control: the items the label prior is the mean of
    heard: np.ndarray

    @property
    def n_items(self) -> int:
        return len(self.allowed)

    @cached_property
    def layout(self) -> Layout:
        """The answers arranged for joint_posterior, once for all the EM's iterations."""
        return Layout.of(self.item, self.code, self.answers, len(self.workers), self.n_items)

    @cached_property
    def count_layout(self) -> Layout:
        """The most likely digits arranged for worker_counts, once for all the EM's iterations."""
        return Layout.of(self.item, self.code, self.digits, len(self.workers), self.n_items)

    def without_models(self) -> Answers:
        """The people's answers alone (every item kept, a model's rows dropped)."""
        rows = ~self.free[self.code]
        kept = np.flatnonzero(np.bincount(self.code[rows], minlength=len(self.workers)) > 0)
        code = np.searchsorted(kept, self.code[rows])
        heard = np.bincount(self.item[rows], minlength=self.n_items) > 0
        return Answers(self.item[rows], code, self.workers[kept], self.answers[rows], self.digits[rows],
                       self.free[kept], self.allowed, heard & self.answered, heard)  # fmt: skip


@dataclass
class State:
    """Where EM stands: the label prior, each worker's grid point and table (a model's free confusion), the
    items' joint posterior over (true label, shift node), the log-likelihood of the answers and the iterations."""

    prior: np.ndarray
    choice: np.ndarray
    table: np.ndarray
    posterior: np.ndarray
    log_likelihood: float = -np.inf
    iterations: int = 0
    converged: bool = False


def fit(
    item: np.ndarray,
    worker: np.ndarray,
    rating: np.ndarray,
    n_items: int,
    max_iter: int = 200,
    tol: float = 1e-6,
    known: np.ndarray | None = None,
    soft: np.ndarray | None = None,
    ambiguity: float | None = None,
) -> OrdinalFit:
    """Fit the model by EM to ratings (`item` indexes 0..n_items-1, `worker` ids, `rating` integers 1-5).
    `known` (per item, 0 or a true label 1-5) fixes the true label of control items with a known answer (hidden
    gold) in every E-step, so they anchor the workers' bias and noise and the shared shift; they stay out of
    the label prior. `soft` ([ratings, 5], rows of nan for hard ratings) gives a model worker's distribution for
    its rows: such a worker gets a free confusion (free_tables), starts uninformative and earns its weight
    against the others. The shared shift's spread is `ambiguity`, else likeliest_spread's on the people's
    answers."""
    data = answers_of(item, worker, rating, n_items, known, soft)
    scores: dict[float, float] = {}
    if ambiguity is None:
        spread, state, scores = likeliest_spread(data.without_models(), tol)
        if data.free.any():
            state = start_state(data)
    else:
        spread, state = ambiguity, start_state(data)
    state = expectation_maximisation(data, state, spread, max_iter, tol)
    bias_grid, noise_grid, _, _ = _grid()
    return OrdinalFit(
        posterior=state.posterior.sum(axis=2),
        prior=state.prior,
        workers=data.workers,
        bias=bias_grid[state.choice],
        noise=noise_grid[state.choice],
        reliability=reliability(state.table),
        answers=np.bincount(data.code, minlength=len(data.workers)),
        iterations=state.iterations,
        converged=state.converged,
        table=state.table,
        ambiguity=spread,
        log_likelihood=state.log_likelihood,
        spread_log_likelihoods=scores,
    )


def likeliest_spread(data: Answers, tol: float) -> tuple[float, State, dict[float, float]]:
    """The point of shift.AMBIGUITY_GRID with the highest likelihood of `data` plus shift.log_prior, each point's
    EM started where the last ended and ranked at shift.RANKING_TOL; with the state EM reached there and each
    point's log-likelihood (how well the answers tell them apart: shift.evidence_span). Fitted on
    people's answers only: a model's soft answer enters as an expected likelihood, not the probability of an
    observation, and with a model among the raters the grid's likelihoods favoured no shift by 3-6 log units
    whether the crowd's items were ambiguous (sd 0.4) or not."""
    state = start_state(data)
    best: tuple[float, float, State] | None = None
    scores = {}
    for spread in shift.AMBIGUITY_GRID:
        state = expectation_maximisation(data, state, float(spread), MAX_RANKING_ITER, max(tol, shift.RANKING_TOL))
        scores[float(spread)] = state.log_likelihood
        score = state.log_likelihood + shift.log_prior(float(spread))
        if best is None or score > best[0]:
            best = (score, float(spread), state)
    assert best is not None
    return best[1], best[2], scores


def answers_of(
    item: np.ndarray,
    worker: np.ndarray,
    rating: np.ndarray,
    n_items: int,
    known: np.ndarray | None,
    soft: np.ndarray | None,
) -> Answers:
    """The ratings checked (hard ones integers 1-5) and indexed for EM."""
    workers, code = np.unique(np.asarray(worker).astype(str), return_inverse=True)
    rating = np.asarray(rating, np.float64)
    hard = np.ones(len(rating), bool) if soft is None else np.isnan(np.asarray(soft, np.float64)).any(axis=1)
    checked = rating[hard]
    if len(checked) and (checked.min() < 1 or checked.max() > 5 or (checked != np.round(checked)).any()):
        raise ValueError("ratings must be integers from 1 to 5")
    answers = answer_matrix(rating, soft)
    fixed = np.zeros(n_items, bool) if known is None else np.asarray(known) > 0
    allowed = np.ones((n_items, len(SCALE)))
    if known is not None:
        allowed[fixed] = np.eye(len(SCALE))[np.asarray(known)[fixed].astype(np.int64) - 1]
    heard = np.bincount(item, minlength=n_items) > 0
    return Answers(
        item=np.asarray(item),
        code=code,
        workers=workers,
        answers=answers,
        digits=np.eye(len(SCALE))[np.argmax(answers, axis=1)],  # what the tables are estimated from
        free=np.bincount(code, weights=~hard, minlength=len(workers)) > 0,  # model workers: a free confusion
        allowed=allowed,
        answered=heard & ~fixed,
        heard=heard,
    )


def start_state(data: Answers) -> State:
    """People start as a typical worker; models uninformative (bias 0, the widest noise: answers carry nothing)."""
    bias_grid, noise_grid, log_grid, _ = _grid()
    typical = int(np.argmin(np.abs(bias_grid - TYPICAL[0]) + np.abs(np.log(noise_grid / TYPICAL[1]))))
    flat = int(np.argmin(np.abs(bias_grid) - noise_grid))
    choice = np.where(data.free, flat, typical)
    table = np.exp(log_grid[choice].reshape(len(choice), len(SCALE), len(SCALE)))
    prior = np.full(len(SCALE), 1 / len(SCALE))
    return State(prior, choice, table, np.tile(prior[None, :, None], (data.n_items, 1, 1)))


def expectation_maximisation(data: Answers, state: State, spread: float, max_iter: int, tol: float) -> State:
    """EM at a fixed spread of the shared shift, from `state`, until no item's posterior moves by `tol`."""
    bias_grid, noise_grid, log_grid, _ = _grid()
    shifts, weights = shift.nodes(spread)
    prior, choice, table, before = state.prior, state.choice, state.table, state.posterior.sum(axis=2)
    for iterations in range(1, max_iter + 1):
        tables = kernel_tables(bias_grid[choice], noise_grid[choice], shifts)
        tables[:, data.free] = shift.shifted_rows(table[data.free], shifts)
        joint, evidence = joint_posterior(
            data.item, data.code, data.answers, tables, prior, weights, data.n_items, data.layout
        )
        joint *= data.allowed[:, :, None]
        joint /= joint.sum(axis=(1, 2), keepdims=True)
        posterior = joint.sum(axis=2)
        prior = (posterior[data.answered].sum(axis=0) + 1) / (data.answered.sum() + len(SCALE))
        counts = worker_counts(joint, data.item, data.code, data.digits, len(data.workers), data.count_layout)
        choice = best_parameters(counts, shifts)
        kernel = np.exp(log_grid[choice].reshape(len(choice), len(SCALE), len(SCALE)))
        table = free_tables(shift.unshifted_counts(counts, shifts, table), kernel, data.free)
        change = float(np.abs(posterior - before).max()) if data.n_items else 0.0
        before = posterior
        done = State(prior, choice, table, joint, float(evidence[data.heard].sum()), iterations, change < tol)
        if done.converged:
            break
    return done


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
