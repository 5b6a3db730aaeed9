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
