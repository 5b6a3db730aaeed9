"""Threshold bands: for each bound of each criterion, pairs just kept beside pairs just rejected, spread over a band
around the threshold, so a requester sees what moving the threshold a little would add or remove.

A band is a tenth of the metric's range (from filter/histograms.json) on each side of the bound. Each side has
`n` slots at evenly spaced values across its half of the band; each slot holds the pair whose metric lies nearest
its value, so the pairs shown spread over the band instead of repeating the one value nearest the bound (IoU and
the length ratio take few distinct values). Kept pairs come from `filter/kept/`; rejected ones are those the
criterion rejected first (having passed the cheaper ones), from `filter/rejected/` or the scored candidate
sample (report/samples.py). Tables are read batch by batch; only the slots' rows are held."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from csts_pipeline.stages.filter.criteria import Criteria

BAND_SHARE = 0.1  # the half-band: this share of the metric's range


@dataclass
class Band:
    """One bound of one criterion: its kept and rejected sides, each a list of pairs ordered by the metric."""

    criterion: str
    bound: float
    minimum: bool  # a lower bound (kept at or above it); else an upper one
    width: float
    kept: list[dict] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)

    @property
    def low(self) -> float:
        return self.bound - self.width

    @property
    def high(self) -> float:
        return self.bound + self.width


class _Slots:
    """The row nearest each target value among the rows offered (ties keep the first offered)."""

    def __init__(self, targets: np.ndarray):
        self.targets = targets
        self.distance = np.full(len(targets), np.inf)
        self.rows: list[dict | None] = [None] * len(targets)

    def offer(self, table: pa.Table, values: np.ndarray) -> None:
        if not len(values):
            return
        gaps = np.abs(values[None, :] - self.targets[:, None])
        best = gaps.argmin(axis=1)
        for slot, row in enumerate(best):
            if gaps[slot, row] < self.distance[slot]:
                self.distance[slot] = gaps[slot, row]
                self.rows[slot] = table.slice(int(row), 1).to_pylist()[0]

    def pairs(self, name: str) -> list[dict]:
        """The held rows, each pair once, ordered by the metric."""
        unique = {row["pair_id"]: row for row in self.rows if row is not None}
        return sorted(unique.values(), key=lambda row: row[name])


def band_width(histogram: dict[str, Any]) -> float:
    edges = np.asarray(histogram["edges"], np.float64)
    return BAND_SHARE * float(edges[-1] - edges[0]) if len(edges) > 1 else BAND_SHARE


def _bands(criteria: Criteria, histograms: dict[str, Any]) -> list[Band]:
    bands = []
    for name in criteria.active():
        low, high = criteria.bounds(name)
        width = band_width(histograms[name])
        bands += [Band(name, float(bound), minimum, width) for bound, minimum in ((low, True), (high, False))
                  if bound is not None]  # fmt: skip
    return bands


def _targets(band: Band, kept: bool, n: int) -> np.ndarray:
    """n values spread over one side of the band: the kept side of a minimum lies above it."""
    steps = band.width * (np.arange(n) + 0.5) / n
    above = kept == band.minimum
    return band.bound + steps if above else band.bound - steps


def threshold_bands(
    criteria: Criteria,
    histograms: dict[str, Any],
    kept_batches: Iterable[pa.Table],
    rejected_batches: Iterable[pa.Table],
    n: int,
) -> list[Band]:
    """Every bound's band, filled from the kept pairs and from the rejected pairs (with their `failed` column)."""
    bands = _bands(criteria, histograms)
    slots = {(id(b), side): _Slots(_targets(b, side == "kept", n)) for b in bands for side in ("kept", "rejected")}
    for table in kept_batches:
        for band in bands:
            values = table.column(band.criterion).to_numpy(zero_copy_only=False).astype(np.float64)
            inside = np.flatnonzero(np.abs(values - band.bound) <= band.width)
            slots[id(band), "kept"].offer(table.take(inside), values[inside])
    for table in rejected_batches:
        for band in bands:
            mine = table.filter(pc.equal(table.column("failed"), band.criterion))
            values = mine.column(band.criterion).to_numpy(zero_copy_only=False).astype(np.float64)
            beyond = values < band.bound if band.minimum else values > band.bound
            inside = np.flatnonzero(beyond & (np.abs(values - band.bound) <= band.width))
            slots[id(band), "rejected"].offer(mine.take(inside), values[inside])
    for band in bands:
        band.kept = slots[id(band), "kept"].pairs(band.criterion)
        band.rejected = slots[id(band), "rejected"].pairs(band.criterion)
    return bands
