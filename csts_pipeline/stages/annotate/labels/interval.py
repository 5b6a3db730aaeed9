"""The 90% interval of an item's label from the rater model's posterior over 1..5 (labels/ordinal.py,
OrdinalFit.interval; docs/annotate-labels.md, "Label quality"), and its threshold calibrated on the items of
known label where the batch has them (calibrated_threshold)."""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

MIN_CALIBRATION_ITEMS = 20  # items of known label (expert sample, gold) with answers that calibrate the threshold
NARROW_P = 0.05  # the known items narrow the runs only where the model's own cover them beyond chance at this level


def credible_interval(
    posterior: np.ndarray, mass: float, threshold: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per posterior row, the run of labels lo..hi spanning its most probable label and every label whose
    probability reaches a threshold shared by the batch: the one at which the runs hold, on average over the rows,
    the posterior mass closest to `mass`, or `threshold` where the items of known label calibrated it
    (calibrated_threshold). Why
    shared: on five discrete labels one item's run cannot hold 0.9 when its mode alone holds 0.97, so per-item
    runs held 95-97% on sharp crowds (a crowd with a good model, or five ratings an item) and covered the truth
    as often: too wide. Spending the batch's mass where the posteriors are wide keeps the coverage of a
    calibrated posterior at `mass` (85-95% on crowds of 2-5 ratings an item, with and without model raters:
    tests/annotate/test_model_workers.py)."""
    n, k = posterior.shape
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    mode = np.argmax(posterior, axis=1)
    if threshold is None:
        threshold = mass_threshold(posterior, mode, mass)
    take = (posterior >= threshold) | (np.arange(k)[None, :] == mode[:, None])
    labels = np.where(take, np.arange(k)[None, :], -1)
    low = np.where(take, np.arange(k)[None, :], k).min(axis=1)
    return low + 1, labels.max(axis=1) + 1


def mass_threshold(posterior: np.ndarray, mode: np.ndarray, mass: float) -> float:
    """The probability a label needs to join its row's run so that the runs hold `mass` on average."""
    n = len(posterior)
    others = posterior.copy()
    others[np.arange(n), mode] = -1.0
    ordered = np.sort(others.reshape(-1))[::-1]
    ordered = ordered[ordered >= 0]
    held = (posterior[np.arange(n), mode].sum() + np.concatenate([[0.0], np.cumsum(ordered)])) / n
    extra = int(np.argmin(np.where(held <= mass + 1e-12, mass - held, np.inf)))  # cells beyond the modes
    extra = extra if held[extra] <= mass + 1e-12 else 0
    return float(ordered[extra - 1]) if extra > 0 else np.inf


def calibrated_threshold(posterior: np.ndarray, label: np.ndarray, mass: float, own: float) -> float | None:
    """The threshold under which credible_interval's runs cover the known labels of a `mass` share of these
    rows (split conformal: the finite-sample quantile, so the coverage on exchangeable items is at least
    `mass`), or None to keep the model's own (`own`, its mass threshold). `posterior`: the known items'
    posteriors from their answers alone (their labels not used); `label`: their known labels, 0-based. None with
    fewer than MIN_CALIBRATION_ITEMS rows. The known items widen the runs whenever they show them too narrow, but
    narrow them only where the model's own runs cover more of them than a `mass` coverage would by chance
    (binomial, NARROW_P): 20-odd items that say the runs could be narrower say it by chance as often as not, and
    on the harder crowds narrowing on 20 items cost up to 0.06 of coverage (bench/annotate/harder_crowds.py).
    Why calibrate: on a real crowd (USTS) the posterior is sharper than the truth warrants, a continuous crowd
    mean where the model has an integer label, and its runs covered 83-85% where the model promised 90; the known
    items show by how much, whatever their labels mean (a crowd's mean or an expert's integer)."""
    n, k = posterior.shape
    if n < MIN_CALIBRATION_ITEMS:
        return None
    mode = np.argmax(posterior, axis=1)
    labels = np.arange(k)[None, :]
    beyond = np.where((label < mode)[:, None], labels <= label[:, None], labels >= label[:, None])
    reach = np.where(beyond, posterior, -np.inf).max(axis=1)  # the label is covered iff reach >= threshold
    reach[label == mode] = np.inf
    misses = int(np.floor((1 - mass) * (n + 1)))
    calibrated = float(np.sort(reach)[misses - 1]) if misses >= 1 else 0.0
    if calibrated <= own:
        return calibrated
    covered = int((reach >= own).sum())
    return calibrated if binom.sf(covered - 1, n, mass) < NARROW_P else None


def interval_words(calibrated_on: int | None, checked_on: int | None = None) -> str:
    """What set the 90% intervals, for the import summary, from agreement.json's model_workers."""
    if calibrated_on:
        known = f"{calibrated_on} items of known label"
        return f"90% intervals calibrated on {known} (set so that their answers alone cover 90% of them)"
    if checked_on and checked_on < MIN_CALIBRATION_ITEMS:
        return (
            f"90% intervals: the rater model's own posterior mass ({checked_on} rated items of known label, fewer "
            f"than the {MIN_CALIBRATION_ITEMS} that calibrate them)"
        )
    if checked_on:
        return (
            f"90% intervals: the rater model's own posterior mass ({checked_on} items of known label found them "
            "wide enough, and too few to narrow them)"
        )
    return "90% intervals: the rater model's own posterior mass (no items of known label to calibrate them)"
