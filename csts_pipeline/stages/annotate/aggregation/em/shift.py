"""The shared per-item shift of the ordinal rater model (aggregation/em/ordinal.py): an item's wording that every rater
reads the same way, a point high or low, so its raters' errors are correlated and more ratings do not average it
away. Each item's true label t is read as t + u with u ~ N(0, ambiguity^2), the same u for every rater of the
item (people and models); the E-step integrates u out on SHIFT_NODES Gauss-Hermite points. Why: without it the
posterior treated the raters of an item as independent and narrowed with every rating, so on crowds with a shared
ambiguity of sd 0.4 the 90% intervals covered the truth 0.81-0.85 of the time at 3 and 5 ratings an item, and
worse with more ratings (bench.annotate.harder_crowds).

The spread is chosen from AMBIGUITY_GRID on the people's answers by their likelihood plus log_prior, a normal
prior around a small spread: between no shift and 0.3 the answers of 400 items often differ by a log unit or
less, even at five ratings an item, so where they say little the prior keeps the spread small; a crowd whose
items are read alike a point off (sd 0.4) moves it from three ratings an item on."""

from __future__ import annotations

import numpy as np

SHIFT_NODES = 5  # Gauss-Hermite points of the shift
AMBIGUITY_GRID = (0.0, 0.15, 0.3, 0.45, 0.6)  # the shift's sd, in points of the 1-5 scale
TYPICAL_AMBIGUITY = (0.2, 0.15)  # the prior on the sd: normal, this mean and sd
FROM_KNOWN = (
    "the items of known label"  # agreement.json's ambiguity_sd_from where the expert sample or gold measured it
)


def log_prior(ambiguity: float) -> float:
    """The log prior density (up to a constant) of a spread."""
    mean, sd = TYPICAL_AMBIGUITY
    return -0.5 * ((ambiguity - mean) / sd) ** 2


def nodes(ambiguity: float) -> tuple[np.ndarray, np.ndarray]:
    """The shared shift's quadrature: SHIFT_NODES points of N(0, ambiguity^2) and their masses (Gauss-Hermite);
    one point of mass 1 at no spread, where the SHIFT_NODES points would all be 0 and EM would compute every
    posterior, count and table SHIFT_NODES times alike."""
    if ambiguity == 0:
        return np.zeros(1), np.ones(1)
    points, weights = np.polynomial.hermite_e.hermegauss(SHIFT_NODES)
    return ambiguity * points, weights / weights.sum()


def shifted_rows(table: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """[g, worker, t, y]: a free confusion table read at t + shift, interpolated between its rows (clipped to the
    scale), so a model's answer to an item everyone reads a point high is judged as it would be for that label."""
    labels = table.shape[1]
    felt = np.clip(np.arange(labels)[None, :] + shifts[:, None], 0, labels - 1)  # [g, t]
    low = np.minimum(np.floor(felt).astype(np.int64), labels - 2)
    frac = (felt - low)[None, :, :, None]  # [1, g, t, 1]
    rows = (1 - frac) * table[:, low] + frac * table[:, low + 1]  # [worker, g, t, y]
    return rows.transpose(1, 0, 2, 3)


def unshifted_counts(counts: np.ndarray, shifts: np.ndarray, table: np.ndarray) -> np.ndarray:
    """counts[worker, g, t, y] moved onto the rows of a free table [worker, t', y] that shifted_rows mixes for t +
    shift_g, each answer split between the two rows by how likely each makes it (one EM step for the mixture):
    the counts the table is re-estimated from. Why not by the mixing weights alone: that blurred the table a
    little more every iteration, so a sharp model read as a noisy one and the intervals came out too wide."""
    labels = counts.shape[2]
    felt = np.clip(np.arange(labels)[None, :] + shifts[:, None], 0, labels - 1)  # [g, t]
    low = np.minimum(np.floor(felt).astype(np.int64), labels - 2)
    from csts_pipeline.stages.annotate.aggregation.em import em_kernels  # numba: imported where EM runs

    return em_kernels.unshifted(np.ascontiguousarray(counts), np.ascontiguousarray(table), low, felt - low)


def relative_log_likelihoods(log_likelihoods: dict[float, float]) -> dict[str, float] | None:
    """agreement.json's record of how the spread was chosen: per spread of the grid, the log-likelihood of the
    people's answers less the best's (None where `--ambiguity-sd` set it). Why keep it: the answers often fit
    every spread within a few log units (above), and the chosen one sets how wide the intervals are."""
    if not log_likelihoods:
        return None
    best = max(log_likelihoods.values())
    return {f"{spread:.2f}": round(value - best, 3) for spread, value in log_likelihoods.items()}


def spread_words(summary: dict) -> str:
    """The spread an import used, in words, from agreement.json's model_workers ("" for a file written before
    it was recorded): the summary and the dataset card say it, since it sets how wide the intervals are."""
    if summary.get("ambiguity_sd") is None:
        return ""
    source = summary.get("ambiguity_sd_from")
    where = {"--ambiguity-sd": "set by --ambiguity-sd", FROM_KNOWN: f"measured on {FROM_KNOWN}"}.get(
        str(source), "chosen from the answers"
    )
    return f"shared per-item shift sd {summary['ambiguity_sd']:.2f} points, {where}"


def evidence_span(summary: dict) -> float | None:
    """How far apart the people's answers told the spreads, from agreement.json's model_workers: the span of
    their log-likelihood over the grid (None where `--ambiguity-sd` set the spread, or for an older file)."""
    profile = summary.get("ambiguity_sd_log_likelihood")
    return -min(profile.values()) if profile else None


def evidence_words(summary: dict) -> str:
    """The import summary's advice where the spread was chosen: the span, and the option that sets it."""
    span = evidence_span(summary)
    if span is None:
        return ""
    grid = f"{AMBIGUITY_GRID[0]:.2f}-{AMBIGUITY_GRID[-1]:.2f}"
    advice = "set --ambiguity-sd where you know your crowd's"
    return f" (the answers' log-likelihood spans {span:.1f} over sd {grid}: {advice})"
