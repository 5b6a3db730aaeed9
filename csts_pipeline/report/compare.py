"""`report --compare OTHER_RUN`: this run beside another one of the same data, the question a requester asks after
changing a threshold: how did the funnel move, and where do the kept pairs lie now? Both runs are read only
through their stage records and filter/histograms.json, so a comparison costs no pass over the pairs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import RECORD, read_json
from csts_pipeline.report.funnel import field, funnel_rows, read_records
from csts_pipeline.report.plots import compared_distribution
from csts_pipeline.report.samples import criteria_of

METRICS = ("iou", "simcse_cosine", "ratio", "length")
# what the comparison reads of the other run's records (funnel.funnel_rows, samples.criteria_of)
NEEDED = (
    "embed.counts.images_in_dataset",
    "embed.counts.images_embedded",
    "mine.counts.image_pairs",
    "mine.counts.candidate_pairs",
    "filter.params",
    "filter.funnel",
    "filter.funnel.candidates",
    "filter.funnel.order",
    "filter.funnel.criteria",
)


def require_shape(records: dict[str, Any], histograms: Any, run: Path) -> None:
    """The other run holds what a comparison reads, or a one-line error saying what it lacks (a run of an older
    version or another shape)."""
    for source in NEEDED:
        try:
            field(records, source)
        except (KeyError, TypeError):
            stage, _, rest = source.partition(".")
            raise UserError(
                f"report --compare {run}: its {stage} record ({run / stage / RECORD}) has no `{rest}`; "
                f"the run is of another shape or version (rerun `csts-pipeline {stage}` there)"
            ) from None
    criteria = field(records, "filter.funnel.criteria")
    lacking = [n for n in field(records, "filter.funnel.order") if not isinstance(criteria.get(n), dict)]
    lacking += [n for n in METRICS if not isinstance(histograms, dict) or "after" not in (histograms.get(n) or {})]
    if lacking:
        raise UserError(
            f"report --compare {run}: its filter output has no funnel entry or histogram for {', '.join(lacking)} "
            "(rerun `csts-pipeline filter` there)"
        )


@dataclass(frozen=True)
class ComparedRow:
    """One funnel line in both runs (None where a run has no such line, e.g. a criterion switched off)."""

    label: str
    this: int | None
    other: int | None

    @property
    def change(self) -> str:
        if self.this is None or self.other is None:
            return ""
        delta = self.this - self.other
        share = f" ({100 * delta / self.other:+.1f}%)" if self.other else ""
        return f"{delta:+,}{share}"


def _values(records: dict[str, Any]) -> dict[str, int | None]:
    return {row.label: (row.value if row.source else None) for row in funnel_rows(records)}


def compare_runs(records: dict[str, Any], other_dir: Path, histograms: dict[str, Any], folder: Path) -> dict[str, Any]:
    """What the comparison section shows: both funnels line by line, both runs' thresholds, and for each metric
    one figure of both runs' kept pairs with both runs' thresholds (drawn into `folder`)."""
    other = read_records(other_dir)
    other_histograms = read_json(other_dir / "filter" / "histograms.json")
    require_shape(other, other_histograms, other_dir)
    mine, theirs = _values(records), _values(other)
    labels = list(dict.fromkeys([*mine, *theirs]))
    rows = [ComparedRow(label, mine.get(label), theirs.get(label)) for label in labels]
    criteria, other_criteria = criteria_of(records["filter"]), criteria_of(other["filter"])
    thresholds = [(name, criteria.rule(name), other_criteria.rule(name)) for name in METRICS]
    figures = []
    for name in METRICS:
        if not any(histograms[name]["after"]) and not any(other_histograms[name]["after"]):
            continue
        file = f"compare_{name}.png"
        compared_distribution(
            name,
            (histograms[name], other_histograms[name]),
            (criteria.bounds(name), other_criteria.bounds(name)),
            ("this run", "the other run"),
            folder / file,
        )
        note = f"{criteria.rule(name)} against {other_criteria.rule(name)}"
        figures.append({"file": file, "title": name, "note": note})
    return {"folder": str(other_dir), "rows": rows, "thresholds": thresholds, "figures": figures}
