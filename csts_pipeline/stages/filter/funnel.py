"""The filter's funnel: how many pairs each criterion rejects (alone and cheapest first), how many are kept, and
histograms of every metric before and after filtering, so a user can see where the thresholds cut.

Counts add up shard by shard (a `Funnel` serialises to JSON and merges), so a resumed run reports the same figures
as an uninterrupted one. Histogram bins are fixed in advance for the same reason (criteria.HISTOGRAM_EDGES).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from csts_pipeline.pipeline.shards import write_atomic
from csts_pipeline.stages.filter.criteria import CHEAP_CRITERIA, CRITERIA, HISTOGRAM_EDGES, Criteria, ScoredPairs


@dataclass
class Funnel:
    """Running totals over batches of scored pairs."""

    criteria: Criteria
    candidates: int = 0
    kept: int = 0
    cosine_evaluated: int = 0
    rejected_alone: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CRITERIA, 0))
    rejected_in_order: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CRITERIA, 0))
    before: dict[str, np.ndarray] = field(
        default_factory=lambda: {name: np.zeros(len(edges) - 1, np.int64) for name, edges in HISTOGRAM_EDGES.items()}
    )
    after: dict[str, np.ndarray] = field(
        default_factory=lambda: {name: np.zeros(len(edges) - 1, np.int64) for name, edges in HISTOGRAM_EDGES.items()}
    )

    def add(self, scored: ScoredPairs) -> None:
        """Counts by one bincount; the histograms come counted with the scores (criteria.ScoredPairs)."""
        self.candidates += len(scored)
        first_failed = np.bincount(scored.first_failed.astype(np.int64) + 1, minlength=len(CRITERIA) + 1)
        self.kept += int(first_failed[0])
        self.cosine_evaluated += int(np.count_nonzero(scored.cosine_computed))
        for code, name in enumerate(CRITERIA):
            if name in scored.failed:
                self.rejected_alone[name] += int(np.count_nonzero(scored.failed[name]))
                self.rejected_in_order[name] += int(first_failed[code + 1])
        for name in CRITERIA:
            self.before[name] += scored.histograms[name][0]
            self.after[name] += scored.histograms[name][1]

    def merge(self, other: Funnel) -> None:
        self.candidates += other.candidates
        self.kept += other.kept
        self.cosine_evaluated += other.cosine_evaluated
        for name in CRITERIA:
            self.rejected_alone[name] += other.rejected_alone[name]
            self.rejected_in_order[name] += other.rejected_in_order[name]
            self.before[name] += other.before[name]
            self.after[name] += other.after[name]

    @property
    def cosine_scope(self) -> str:
        if not self.criteria.needs_encoder:
            return "off"
        if self.cosine_evaluated == self.candidates:
            return "all candidates"
        cheap = self._cheap_active()
        names = f"{', '.join(cheap[:-1])} and {cheap[-1]}" if len(cheap) > 1 else "".join(cheap)
        return f"only the {self.cosine_evaluated:,} pairs that passed {names}"

    def _cheap_active(self) -> list[str]:
        return [name for name in CHEAP_CRITERIA if name in self.criteria.active()]

    def to_json(self) -> dict[str, Any]:
        """The report of the stage record; `from_json` reads it back (histograms included)."""
        active = self.criteria.active()
        return {
            "candidates": self.candidates,
            "kept": self.kept,
            "rejected": self.candidates - self.kept,
            "order": list(CRITERIA),
            "criteria": {
                name: {
                    "rule": self.criteria.rule(name),
                    "rejected_alone": self.rejected_alone[name] if name in active else None,
                    "rejected_in_order": self.rejected_in_order[name] if name in active else None,
                }
                for name in CRITERIA
            },
            "cosine_evaluated": self.cosine_evaluated,
            "cosine_scope": self.cosine_scope,
            "histograms": self.histograms_json(),
        }

    @classmethod
    def from_json(cls, criteria: Criteria, data: dict[str, Any]) -> Funnel:
        funnel = cls(criteria, candidates=data["candidates"], kept=data["kept"])
        funnel.cosine_evaluated = data["cosine_evaluated"]
        for name, entry in data["criteria"].items():
            funnel.rejected_alone[name] = entry["rejected_alone"] or 0
            funnel.rejected_in_order[name] = entry["rejected_in_order"] or 0
        for name, entry in data["histograms"].items():
            funnel.before[name] = np.asarray(entry["before"], np.int64)
            funnel.after[name] = np.asarray(entry["after"], np.int64)
        return funnel

    def histograms_json(self) -> dict[str, Any]:
        return {
            name: {
                "edges": HISTOGRAM_EDGES[name].tolist(),
                "before": self.before[name].tolist(),
                "after": self.after[name].tolist(),
                "rule": self.criteria.rule(name),
                "before_covers": self.cosine_scope if name == "simcse_cosine" else "all candidates",
            }
            for name in CRITERIA
        }

    def table(self) -> str:
        """The funnel as a text table, cheapest criterion first."""
        active = self.criteria.active()

        def share(count: int) -> str:
            return f"{count:,} ({100 * count / self.candidates:.1f}%)" if self.candidates else f"{count:,}"

        header = f"{'criterion':<15}{'rule':<28}{'rejected alone':>20}{'rejected in order':>22}{'remaining':>14}"
        lines = [f"filter funnel: {self.candidates:,} candidate pairs", header, "-" * len(header)]
        remaining = self.candidates
        for name in CRITERIA:
            if name not in active:
                lines.append(f"{name:<15}{'off':<28}{'-':>20}{'-':>22}{remaining:>14,}")
                continue
            remaining -= self.rejected_in_order[name]
            mark = "*" if name == "simcse_cosine" and self.cosine_evaluated < self.candidates else ""
            alone = share(self.rejected_alone[name]) + mark
            lines.append(
                f"{name:<15}{self.criteria.rule(name):<28}{alone:>20}{share(self.rejected_in_order[name]):>22}"
                f"{remaining:>14,}"
            )
        lines.append(f"{'kept':<15}{'':<28}{'':>20}{'':>22}{share(self.kept):>14}")
        if self.criteria.needs_encoder and self.cosine_evaluated < self.candidates:
            lines.append(
                f"* simcse_cosine was computed for {self.cosine_scope}; its 'alone' count and 'before' histogram "
                "cover those pairs only (--full-report computes it for every candidate)"
            )
        return "\n".join(lines)

    def save_plot(self, path: Path) -> None:
        """Histograms before and after filtering, one panel per metric, thresholds marked; written atomically."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(2, 2, figsize=(11, 7.5))
        for axis, name in zip(axes.flat, CRITERIA):
            edges = HISTOGRAM_EDGES[name]
            before_label = (
                "before"
                if name != "simcse_cosine" or self.cosine_scope == "all candidates"
                else ("before (pairs passing the cheaper criteria)")
            )
            axis.stairs(self.before[name], edges, color="0.55", fill=True, alpha=0.5, label=before_label)
            axis.stairs(self.after[name], edges, color="tab:blue", linewidth=1.5, label="kept")
            for bound in self.criteria.bounds(name):
                if bound is not None:
                    axis.axvline(bound, color="tab:red", linestyle="--", linewidth=1)
            axis.set_title(f"{name}  ({self.criteria.rule(name)})")
            if self.before[name].any():
                axis.set_yscale("log")
            axis.set_ylabel("pairs")
            axis.legend(fontsize=8)
        figure.suptitle(f"filter: {self.candidates:,} candidates, {self.kept:,} kept")
        figure.tight_layout()
        write_atomic(path, lambda handle: figure.savefig(handle, format="png", dpi=110))
        plt.close(figure)
