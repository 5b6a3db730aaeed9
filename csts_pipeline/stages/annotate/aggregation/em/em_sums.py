"""The E- and M-step's sums for the ordinal rater model (aggregation/em/ordinal.py): each answer's likelihood under its
worker's table, summed by item into the joint posterior, and the expected counts summed by worker, as sparse
products arranged once per batch (Layout), not a sort or a gather every EM iteration."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property, wraps
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
from scipy import sparse
from threadpoolctl import ThreadpoolController

T = TypeVar("T")

SCALE = np.arange(1, 6, dtype=np.float64)  # the answers' scale, 1..5 (ordinal.SCALE)


def one_blas_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` with numpy's BLAS on one thread: EM's products are small, a few milliseconds each, and two BLAS threads
    on a busy machine made each up to ten times as slow as one (a thread waits on the other's core)."""

    @wraps(fn)
    def limited(*args: Any, **kwargs: Any) -> T:
        with _threads().limit(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return limited


@cache
def _threads() -> ThreadpoolController:
    return ThreadpoolController()


def _kernels() -> ModuleType:
    """em_kernels.py beside this, imported where EM runs: numba is not loaded by an import without the rater model."""
    from csts_pipeline.stages.annotate.aggregation.em import em_kernels

    return em_kernels


def joint_posterior(
    item: np.ndarray,
    code: np.ndarray,
    answers: np.ndarray,
    tables: np.ndarray,
    prior: np.ndarray,
    *,
    weights: np.ndarray,
    n_items: int,
    layout: Layout | None = None,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """E-step: per item, the posterior [items, t, g] over its true label and the shared shift's node g, given its
    answers, and the log-likelihood of its answers; tables[g, worker, t, y] holds P(y | t + shift_g), `weights`
    the nodes' prior mass. `layout`: Layout.of these answers (Answers.layout keeps it across iterations); `out`:
    a C-ordered float64 array of [items, t, g] to write the posterior into (EM reuses two: a fresh array of
    200,000 x 25 was page faults every iteration)."""
    layout = layout or Layout.of(item, code, answers, tables.shape[1], n_items)
    columns = len(SCALE) * len(weights)
    cells = tables.transpose(1, 3, 2, 0).reshape(-1, columns)  # [worker * y, t * g]: a hard answer's likelihoods
    like = np.concatenate([cells, _soft_likelihood(answers[layout.soft], tables, code[layout.soft])])
    by_item = layout.by_item
    log_like = np.log(np.maximum(like, 1e-300))
    post = np.empty((n_items, columns)) if out is None else out.reshape(n_items, columns)
    top = np.empty(n_items)
    kernels = _kernels()
    kernels.item_log_posteriors(
        indptr=by_item.indptr, indices=by_item.indices, data=by_item.data, log_like=log_like,
        log_prior=np.log(prior), log_weights=np.log(weights), post=post, top=top,
    )  # fmt: skip
    np.exp(post, out=post)  # numpy's exp over the whole array: a scalar exp a cell in the loop took 4 times as long
    evidence = kernels.normalised(post, top)
    return post.reshape(n_items, len(SCALE), len(weights)), evidence


def restrict(joint: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The joint posterior [items, t, g] kept to each item's allowed true labels (allowed[items, t], 0 or 1: a
    known label allows one) and normalised again, in place; returns the posterior over t, [items, t]."""
    posterior = np.empty(joint.shape[:2])
    _kernels().restrict(joint, np.ascontiguousarray(allowed, np.float64), posterior)
    return posterior


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
    *,
    n: int,
    layout: Layout | None = None,
) -> np.ndarray:
    """Expected counts[worker, g, t, y]: each answer's distribution over y (its most likely digit, in `fit`)
    spread over the (true label, shift node) pairs by its item's joint posterior [items, t, g]. `layout`:
    Layout.of these answers (Answers.count_layout keeps it across iterations)."""
    layout = layout or Layout.of(item, code, answers, n, len(joint))
    by_item = layout.cells_by_item
    flat = joint.reshape(len(joint), -1)
    cells = _kernels().cell_sums(by_item.indptr, by_item.indices, by_item.data, flat, by_item.shape[0])
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

    @cached_property
    def cells_by_item(self) -> sparse.csc_matrix:
        """by_cell by item (its columns): per item the (worker, y) cells of its answers, for worker_counts."""
        return self.by_cell.tocsc()

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
