"""The 90% interval of an item's label from its own posterior over 1..5 (OrdinalFit.interval), and the mass it
holds calibrated on the items of known label where the batch has them (calibrated_mass)."""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

from csts_pipeline.stages.annotate.aggregation import thresholds


def _runs(posterior: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's run of labels grown from its most probable one, one label a step, always the more probable
    neighbour: [rows, step] the run's ends and the mass it holds after each step (step 0: the mode alone)."""
    n, k = posterior.shape
    rows = np.arange(n)
    low = np.argmax(posterior, axis=1)
    high, held = low.copy(), posterior[rows, low]
    lows, highs, helds = [low], [high], [held]
    for _ in range(k - 1):
        left = np.where(low > 0, posterior[rows, np.maximum(low - 1, 0)], -1.0)
        right = np.where(high < k - 1, posterior[rows, np.minimum(high + 1, k - 1)], -1.0)
        go_left = left >= right
        low, high, held = low - go_left, high + ~go_left, held + np.maximum(left, right)
        lows.append(low)
        highs.append(high)
        helds.append(held)
    return np.stack(lows, 1), np.stack(highs, 1), np.stack(helds, 1)


def credible_interval(posterior: np.ndarray, mass: float) -> tuple[np.ndarray, np.ndarray]:
    """Per posterior row, the run of labels lo..hi (1-based) grown from its most probable label, the more probable
    neighbour first, to the length whose mass is closest to `mass` of that row's own posterior. Each item's own:
    a batch-wide threshold made nearly every interval one label wide once the modes alone averaged 0.9, and on a
    real crowd (USTS-C) covered the truth no better than a constant guess. Closest, not at least: on five labels a
    run that must reach 0.9 holds 0.95 on average, and on crowds whose posteriors are coarse covered 0.97-0.99."""
    if len(posterior) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lows, highs, helds = _runs(posterior)
    step = np.argmin(np.abs(helds - mass) + 1e-9 * np.arange(helds.shape[1]), axis=1)
    rows = np.arange(len(posterior))
    return lows[rows, step] + 1, highs[rows, step] + 1


CALIBRATION_GRID = np.round(np.arange(0.5, 0.9951, 0.005), 3)  # the masses calibrated_mass chooses among


def calibrated_mass(posterior: np.ndarray, label: np.ndarray, mass: float) -> float | None:
    """The smallest mass of CALIBRATION_GRID under which credible_interval's runs cover the known labels (0-based
    `label`) of these rows at the finite-sample rank of split conformal (so the coverage on exchangeable items is
    at least `mass`), or None to keep `mass`. `posterior`: the known items' label posteriors from their answers
    alone. None with fewer than thresholds.MIN_EVIDENCE rows. The known items widen the runs whenever they show them
    too narrow, but narrow them only where the runs at `mass` cover more of them than chance would (binomial,
    thresholds.NARROW_P): 20-odd items that say the runs could be narrower say it by chance as often as not; all 20
    covered says it (p 0.12)."""
    n = len(posterior)
    if n < thresholds.MIN_EVIDENCE:
        return None
    need = min(int(np.ceil((n + 1) * mass)), n)

    def covered(at: float) -> int:
        low, high = credible_interval(posterior, at)
        return int(((low - 1 <= label) & (label <= high - 1)).sum())

    enough = [float(m) for m in CALIBRATION_GRID if covered(float(m)) >= need]
    calibrated = enough[0] if enough else float(CALIBRATION_GRID[-1])
    if calibrated >= mass:
        return calibrated
    return calibrated if binom.sf(covered(mass) - 1, n, mass) < thresholds.NARROW_P else None


def interval_words(calibrated_on: int | None, checked_on: int | None = None) -> str:
    """What set the 90% intervals, for the import summary, from agreement.json's model_workers."""
    if calibrated_on:
        known = f"{calibrated_on} items of known label"
        return (
            f"90% intervals calibrated on {known} (each item's run widened until their answers alone cover 90% of them)"
        )
    if checked_on and checked_on < thresholds.MIN_EVIDENCE:
        return (
            f"90% intervals: each item's own posterior mass ({checked_on} rated items of known label, fewer "
            f"than the {thresholds.MIN_EVIDENCE} that calibrate them)"
        )
    if checked_on:
        return (
            f"90% intervals: each item's own posterior mass ({checked_on} items of known label found them "
            "wide enough, and too few to narrow them)"
        )
    return "90% intervals: each item's own posterior mass (no items of known label to calibrate them)"
