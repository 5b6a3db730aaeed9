"""The not-pertinent verdict per item from the raters' flags, weighed by each rater's skill (crowd-kit).

Every answer is a binary vote (the condition flagged not pertinent or not). A worker-skill model from crowd-kit
infers each item's verdict and each worker's skill from the votes of all items at once, so a spammer's random
flags count for less than a careful worker's. The model was chosen by bench/crowd_models.py (docs/annotate.md,
"Label quality"): on simulated crowds with 25% spammers, Dawid-Skene and MACE found the not-pertinent conditions
best (F1 0.83, against 0.78 for the plain share of flags), GLAD and one-coin Dawid-Skene less well; Dawid-Skene
is deterministic and twice as fast as MACE."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

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
    p_flag: np.ndarray | None = None,
) -> Verdict:
    """P(not pertinent) per item and each worker's skill, by the crowd-kit `model` (one of MODELS); with soft
    votes (`p_flag`: a model worker's P(not pertinent) per row, nan for people's votes), by soft_dawid_skene."""
    if p_flag is not None and not np.isnan(p_flag).all():
        votes = np.where(np.isnan(p_flag), flagged.astype(np.float64), p_flag)
        return soft_dawid_skene(item, worker, votes, n_items)
    workers = np.unique(np.asarray(worker).astype(str))
    p_flag = np.full(n_items, np.nan)
    skill = np.full(len(workers), np.nan)
    if len(item) == 0:
        return Verdict(p_flag, workers, skill)
    if not flagged.any():  # nothing to weigh: every answered item is pertinent
        p_flag[np.unique(item)] = 0.0
        return Verdict(p_flag, workers, skill)
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


def soft_dawid_skene(
    item: np.ndarray, worker: np.ndarray, vote: np.ndarray, n_items: int, n_iter: int = 100, tol: float = 1e-6
) -> Verdict:
    """Two-class Dawid-Skene by EM where a vote may be soft (`vote`: P(flag) per row; 0 or 1 for a person). As in
    the ordinal model, a worker's 2 x 2 confusion is estimated from its most likely votes and a soft vote q
    enters as the expected likelihood q P(flag | z) + (1 - q) P(ok | z), so an unsure model weighs little.
    Each confusion has one pseudo-vote of a fair worker (right 0.8 of the time) per verdict, so a worker with a
    handful of votes is not judged on them alone. With only hard votes this is Dawid-Skene as crowd-kit fits
    it, up to that smoothing."""
    workers, code = np.unique(np.asarray(worker).astype(str), return_inverse=True)
    q = np.stack([np.asarray(vote, np.float64), 1 - np.asarray(vote, np.float64)], axis=1)  # [rows, (flag, ok)]
    most = np.eye(2)[(q[:, 0] < 0.5).astype(np.int64)]  # the most likely vote: what the confusions count
    p_flag = np.full(n_items, np.nan)
    votes = np.bincount(item, minlength=n_items)
    answered = votes > 0
    share = np.bincount(item, weights=q[:, 0], minlength=n_items) / np.maximum(votes, 1)  # start: the mean vote
    post = np.stack([share, 1 - share], axis=1)
    confusion = np.tile(np.array([[0.8, 0.2], [0.2, 0.8]]), (len(workers), 1, 1))  # [worker, z, vote]
    for _ in range(n_iter):
        counts = np.zeros((len(workers), 2, 2)) + np.array([[0.8, 0.2], [0.2, 0.8]])
        np.add.at(counts, code, post[item][:, :, None] * most[:, None, :])
        confusion = counts / counts.sum(axis=2, keepdims=True)
        prior = (post[answered].sum(axis=0) + 1) / (answered.sum() + 2)
        log_post = np.tile(np.log(prior), (n_items, 1))
        joint = q[:, None, :] * confusion[code]
        for z in range(2):
            log_post[:, z] += np.bincount(item, weights=np.log(joint[:, z].sum(axis=1)), minlength=n_items)
        updated = np.exp(log_post - log_post.max(axis=1, keepdims=True))
        updated /= updated.sum(axis=1, keepdims=True)
        change = float(np.abs(updated - post).max()) if n_items else 0.0
        post = updated
        if change < tol:
            break
    p_flag[answered] = post[answered, 0]
    skill = (confusion[:, 0, 0] + confusion[:, 1, 1]) / 2
    return Verdict(p_flag, workers, skill)
