"""Krippendorff's alpha from the coincidence matrix (Krippendorff 2011, "Computing Krippendorff's Alpha-
Reliability"): agreement that, unlike Fleiss' kappa, can weigh a 4 against a 5 as a small disagreement
(ordinal, interval) and takes any number of ratings per item.

alpha = 1 - D_o / D_e, with D_o = sum_ck o_ck d_ck / n and D_e = sum_ck n_c n_k d_ck / (n (n - 1)), where
o_ck = sum_u (n_uc n_uk - [c = k] n_uc) / (m_u - 1) over the units u with m_u >= 2 values, n_c = sum_k o_ck,
and d_ck the squared difference of the metric."""

from __future__ import annotations

import numpy as np

METRICS = ("nominal", "ordinal", "interval")


def coincidences(counts: np.ndarray) -> np.ndarray:
    """The coincidence matrix o[c, k] from counts[unit, value] (how many coders gave the unit the value);
    units with fewer than two values are not pairable and count for nothing."""
    counts = np.asarray(counts, dtype=np.float64)
    pairable = counts.sum(axis=1)
    counts = counts[pairable >= 2]
    weight = 1 / (counts.sum(axis=1) - 1)
    return (counts * weight[:, None]).T @ counts - np.diag((counts * weight[:, None]).sum(axis=0))


def distances(values: np.ndarray, margins: np.ndarray, metric: str) -> np.ndarray:
    """The squared metric difference d[c, k] between the sorted `values` (ordinal uses the `margins` n_c:
    (sum of n_g for g from c to k - (n_c + n_k) / 2) squared)."""
    values = np.asarray(values, dtype=np.float64)
    if metric == "nominal":
        return 1.0 - np.eye(len(values))
    if metric == "interval":
        return (values[:, None] - values[None, :]) ** 2
    if metric == "ordinal":
        cumulative = np.cumsum(margins)
        index = np.arange(len(values))
        low, high = np.minimum.outer(index, index), np.maximum.outer(index, index)
        between = cumulative[high] - cumulative[low] + margins[low]
        return (between - (margins[:, None] + margins[None, :]) / 2) ** 2
    raise ValueError(f"metric must be one of {', '.join(METRICS)} (got {metric!r})")


def alpha(counts: np.ndarray, values: np.ndarray, metric: str) -> float:
    """Krippendorff's alpha of counts[unit, value] over the sorted `values`; nan when there is no variation
    (every pairable value the same) or nothing pairable."""
    observed = coincidences(counts)
    margins = observed.sum(axis=1)
    n = margins.sum()
    if n < 2:
        return float("nan")
    d = distances(values, margins, metric)
    expected = (np.outer(margins, margins) * d).sum() / (n - 1)
    if expected == 0:
        return float("nan")
    return float(1 - (observed * d).sum() / expected)
