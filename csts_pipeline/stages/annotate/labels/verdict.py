"""The not-pertinent verdict per item from the raters' flags, weighed by each rater's skill (crowd-kit).

Every answer is a binary vote (the condition flagged not pertinent or not). A worker-skill model from crowd-kit
infers each item's verdict and each worker's skill from the votes of all items at once, so a spammer's random
flags count for less than a careful worker's. The model was chosen by bench/annotate/crowd_models.py:
on simulated crowds with 25% spammers, Dawid-Skene and MACE found the
not-pertinent conditions best (F1 0.83, against 0.78 for the plain share of flags), GLAD and one-coin Dawid-Skene
less well; Dawid-Skene is deterministic and twice as fast as MACE. The import runs it as dawid_skene, crowd-kit's
steps replayed in arrays (crowd-kit's pandas took 10.7 of the import's 37.7 s at 20,000 items); the bench runs
crowd-kit's."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse

FLAG, OK = "not_pertinent", "pertinent"
CHOSEN = "dawid_skene"


def _models() -> dict[str, Callable[[], Any]]:
    """The crowd-kit models the bench compares, by name (imported on use: crowd-kit is slow to import)."""
    from crowdkit.aggregation import GLAD, MACE, DawidSkene, OneCoinDawidSkene

    return {
        "dawid_skene": lambda: DawidSkene(n_iter=100),
        "one_coin_dawid_skene": lambda: OneCoinDawidSkene(n_iter=100),
        "glad": lambda: GLAD(n_iter=100),
        "mace": lambda: MACE(n_restarts=5, n_iter=50, random_state=0),
    }


MODELS = ("dawid_skene", "one_coin_dawid_skene", "glad", "mace")


@dataclass
class Verdict:
    """Per item P(not pertinent) (nan without any answer); per worker (in `workers` order) the skill: the mean
    of P(vote = verdict | verdict) over the two verdicts (Dawid-Skene's confusion matrix; nan for models without
    one)."""

    p_flag: np.ndarray
    workers: np.ndarray
    skill: np.ndarray


def share_of_flags(item: np.ndarray, flagged: np.ndarray, n_items: int) -> np.ndarray:
    """The plain rule: the share of an item's answers that flag it (nan without answers)."""
    answers = np.bincount(item, minlength=n_items)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.bincount(item, weights=flagged, minlength=n_items) / answers


def infer(
    item: np.ndarray,
    worker: np.ndarray,
    flagged: np.ndarray,
    n_items: int,
    model: str = CHOSEN,
) -> Verdict:
    """P(not pertinent) per item and each worker's skill, by the crowd-kit `model` (one of MODELS), from people's
    votes; a language model's votes are weighed against this verdict afterwards (model_workers.weigh_flags)."""
    workers = np.unique(np.asarray(worker).astype(str))
    p_flag = np.full(n_items, np.nan)
    skill = np.full(len(workers), np.nan)
    if len(item) == 0:
        return Verdict(p_flag, workers, skill)
    if not flagged.any():  # nothing to weigh: every answered item is pertinent
        p_flag[np.unique(item)] = 0.0
        return Verdict(p_flag, workers, skill)
    if model == CHOSEN:
        return dawid_skene(item, worker, flagged, n_items)
    votes = pd.DataFrame({"task": item, "worker": np.asarray(worker).astype(str), "label": np.where(flagged, FLAG, OK)})
    fitted = _models()[model]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted.fit(votes)
    probas = fitted.probas_
    shown = probas[FLAG] if FLAG in probas.columns else pd.Series(0.0, index=probas.index)
    p_flag[shown.index.to_numpy(np.int64)] = shown.to_numpy(np.float64)
    errors = getattr(fitted, "errors_", None)
    if errors is not None:
        skill = balanced_skill(errors, workers)
    return Verdict(p_flag, workers, skill)


def balanced_skill(errors: pd.DataFrame, workers: np.ndarray) -> np.ndarray:
    """From crowd-kit's confusion frame (rows (worker, vote), columns true verdict: P(vote | verdict)), each
    worker's mean chance of voting the true verdict; a vote a worker never gave has probability 0."""
    right = np.zeros(len(workers))
    order = {name: index for index, name in enumerate(workers)}
    verdicts = [name for name in (FLAG, OK) if name in errors.columns]
    for (name, vote), row in errors.iterrows():
        if vote in verdicts and str(name) in order:
            right[order[str(name)]] += row[vote] / len(verdicts)
    return right


def _by_column(ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
    """`ufunc` reduced over the columns of `values` [rows, a few], column by column: numpy's reduce along a short
    row is slow, one pass a column over a whole column is not (dawid_skene's [items, 2] arrays, 100 iterations)."""
    found = values[:, 0].copy()
    for k in range(1, values.shape[1]):
        ufunc(found, values[:, k], out=found)
    return found


DS_ITERATIONS, DS_TOL, DS_EPS = 100, 1e-5, 1e-10  # crowd-kit DawidSkene(n_iter=100): its tol and its floor


def dawid_skene(item: np.ndarray, worker: np.ndarray, flagged: np.ndarray, n_items: int) -> Verdict:
    """crowd-kit's DawidSkene(n_iter=100) on the flags, step for step, in arrays: the same verdicts and skills
    to float noise (tests/annotate/test_quality.py compares the two), without its pandas joins and group-bys
    (the cost of the ratings import at scale). Start: each item's share of votes for each answer (majority vote's
    probabilities); then E- and M-steps until the evidence lower bound per vote gains less than DS_TOL; each
    worker's P(vote | verdict) kept above DS_EPS among the votes it gave, the final probabilities too."""
    workers, code = np.unique(np.asarray(worker).astype(str), return_inverse=True)
    flagged = np.asarray(flagged, bool)
    labels = [name for name, given in ((FLAG, flagged.any()), (OK, not flagged.all())) if given]  # crowd-kit's order
    vote = np.where(flagged, 0, 1) if len(labels) == 2 else np.zeros(len(item), np.int64)
    tasks, task = np.unique(item, return_inverse=True)
    cell = code * len(labels) + vote  # (worker, vote)
    given = np.bincount(cell, minlength=len(workers) * len(labels)) > 0
    ones = np.ones(len(cell))
    by_task = sparse.csr_matrix((ones, (task, cell)), shape=(len(tasks), len(given)))  # votes per (task, cell)
    by_cell = by_task.T.tocsr()

    def m_step(probas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # P(vote | verdict) [worker * vote, k]
        summed = by_cell @ probas  # each (worker, vote)'s posterior mass per verdict
        counts = np.where(given[:, None], np.maximum(summed, DS_EPS), 0.0).reshape(len(workers), len(labels), -1)
        return (counts / counts.sum(axis=1)[:, None, :]).reshape(len(given), -1), summed

    probas = np.stack([np.bincount(task, weights=vote == k, minlength=len(tasks)) for k in range(len(labels))], 1)
    probas = probas / probas.sum(axis=1, keepdims=True)
    priors = probas.mean(axis=0)
    errors, _ = m_step(probas)
    loss = -np.inf
    for _ in range(DS_ITERATIONS):
        priors = np.maximum(priors, DS_EPS)
        with np.errstate(divide="ignore"):  # a vote a worker never gave: -inf, never read
            log_like = np.log2(priors) + by_task @ np.log2(errors)
        probas = np.exp2(log_like - _by_column(np.maximum, log_like)[:, None])
        probas /= _by_column(np.add, probas)[:, None]
        priors = np.array([probas[:, k].mean() for k in range(probas.shape[1])])
        errors, summed = m_step(probas)
        with np.errstate(divide="ignore"):  # sum over votes of P(verdict) log(P(vote | verdict) prior), by cell
            log_errors = np.where(given[:, None], np.log(errors), 0.0)
        expected = (summed * (log_errors + np.log(np.maximum(priors, DS_EPS)))).sum()
        probas = np.maximum(probas, DS_EPS)
        new_loss = (expected - (np.log(probas) * probas).sum()) / len(item)
        if new_loss - loss < DS_TOL:
            break
        loss = new_loss
    p_flag = np.full(n_items, np.nan)
    p_flag[tasks] = probas[:, 0] if labels[0] == FLAG else 0.0
    kept = errors.reshape(len(workers), len(labels), len(labels))
    skill = np.trace(kept, axis1=1, axis2=2) / len(labels)  # mean P(vote = verdict | verdict): balanced_skill
    return Verdict(p_flag, workers, skill)
