"""A similarity model's whole score in the rater model (ordinal.py beside this): per true label a normal density of
the score, learned in the EM, instead of the score's bin among five.

Why: five quantile bins keep a fifth of what the score says and leave a free 5 x 5 table to map them, which, beside
a weak person (one rating an item), collapsed the label prior onto 1 and 5 (STS-B, MiniLM: labels at Spearman
0.67 where the model alone reaches 0.81; bench/annotate/trust_evidence.py). A score is a number whose order is what a
model of unknown calibration tells, so each model's scores become normal scores of their ranks in the batch (z,
mean 0, sd 1, whatever the model's scale: a cosine or a regression score), and a true label t makes z normal
around mu_t with one sd per model: six parameters, fitted in the M-step from the items' posteriors with
SCORE_PSEUDO items of the batch's marginal (mean 0, sd 1) per label, so a label with little evidence says little.
The means are kept in the order of the labels (a model whose agreement with people is positive: trust.py). An
item everyone reads a point high (the shared shift, aggregation/em/shift.py) moves the mean the model feels with it."""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr, ndtri
from scipy.stats import rankdata

from csts_pipeline.stages.annotate.aggregation import thresholds

LABELS = 5
BINS = np.asarray(ndtri(np.arange(1, LABELS) / LABELS))  # the marginal's quintiles: the table reported


def normal_scores(score: np.ndarray, family: np.ndarray) -> np.ndarray:
    """Per row, the normal score of its score's rank among its family's (nan where no score); ties share a rank."""
    z = np.full(len(score), np.nan)
    for f in np.unique(family[family >= 0]):
        rows = np.flatnonzero(family == f)
        z[rows] = ndtri((rankdata(score[rows]) - 0.5) / len(rows))
    return z


def start(families: int) -> np.ndarray:
    """[families, LABELS + 1]: every mean 0 and sd 1: the score says nothing until the people have spoken."""
    return np.hstack([np.zeros((families, LABELS)), np.ones((families, 1))])


def felt_means(params: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """[families, t, g]: the mean at each true label moved by each shift node (interpolated, held at the ends)."""
    felt = np.clip(np.arange(1, LABELS + 1)[:, None] + shifts[None, :], 1, LABELS)  # [t, g]
    return np.stack([np.interp(felt, np.arange(1, LABELS + 1), p[:LABELS]) for p in params])


def log_likelihood(z: np.ndarray, family: np.ndarray, params: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """[rows, t, g]: log N(z; mu_f(t + shift_g), sd_f) of each scored row (rows as given, all scored)."""
    mean = felt_means(params, shifts)[family]  # [rows, t, g]
    sd = params[family, LABELS][:, None, None]
    return -0.5 * ((z[:, None, None] - mean) / sd) ** 2 - np.log(sd)


def m_step(z: np.ndarray, family: np.ndarray, weight: np.ndarray, families: int) -> np.ndarray:
    """Each family's means and sd from the rows' posteriors over the true label (`weight` [rows, t]), with
    SCORE_PSEUDO items per label at the marginal; the means sorted into the labels' order."""
    params = start(families)
    for f in range(families):
        rows = family == f
        w, x = weight[rows], z[rows]
        total = w.sum(axis=0) + thresholds.SCORE_PSEUDO
        mean = np.sort((w * x[:, None]).sum(axis=0) / total)
        spread = (w * (x[:, None] - mean[None, :]) ** 2).sum() + thresholds.SCORE_PSEUDO * LABELS * (1 + mean**2).mean()
        params[f, :LABELS] = mean
        params[f, LABELS] = np.sqrt(spread / (w.sum() + thresholds.SCORE_PSEUDO * LABELS))
    return params


def reliability(params: np.ndarray, prior: np.ndarray) -> float:
    """The correlation of the true label and the score's normal score, t drawn from `prior`: the whole score's
    reliability on this batch (its quintiles' table says less)."""
    t = np.arange(1, LABELS + 1, dtype=np.float64)
    mean, sd = params[:LABELS], params[LABELS]
    mean_t, mean_z = prior @ t, prior @ mean
    cov = prior @ (t * mean) - mean_t * mean_z
    var_t, var_z = prior @ t**2 - mean_t**2, prior @ mean**2 - mean_z**2 + sd**2
    return float(cov / np.sqrt(max(var_t * var_z, 1e-12)))


def tables(params: np.ndarray) -> np.ndarray:
    """[families, t, y]: P(the score's quintile is y | t), the density read at the marginal's quintiles: what
    the workers table reports (reliability) and what the answers' bins are read by outside the EM."""
    edges = np.concatenate([[-np.inf], BINS, [np.inf]])
    mean, sd = params[:, :LABELS, None], params[:, LABELS, None, None]
    cdf = ndtr((edges[None, None, :] - mean) / sd)
    return np.diff(cdf, axis=2)
