"""The funnel from images to kept pairs, every number taken from the stage records as they are.

Each row names the record field it shows (`source`, e.g. `filter.funnel.kept`), and the page carries it as a
`data-record` attribute, so the browser test compares the page with the records field by field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.records import require_record

STAGES = ("embed", "mine", "filter")


@dataclass(frozen=True)
class FunnelRow:
    """One line of the funnel: what it counts, the number, where in the records it comes from."""

    label: str
    value: int
    source: str
    rule: str = ""
    alone: int | None = None
    alone_source: str = ""
    remaining: int | None = None
    note: str = ""
    share: str = ""  # the count as a share of what it is counted from (images, candidates)
    remaining_share: str = ""


def percent(part: int | None, whole: int) -> str:
    """`part` as a percentage of `whole`, to one decimal ("" when either is missing)."""
    return "" if part is None or not whole else f"{100 * part / whole:.1f}%"


def read_records(work_dir: Path) -> dict[str, dict[str, Any]]:
    """The finished records of the data stages; a missing or incomplete one is a one-line error naming it."""
    return {name: require_record(work_dir / name, name) for name in STAGES}


def field(records: dict[str, Any], source: str) -> Any:
    """The value at a dotted path of the records (`filter.funnel.criteria.iou.rejected_in_order`)."""
    value: Any = records
    for key in source.split("."):
        value = value[key]
    return value


def funnel_rows(records: dict[str, dict[str, Any]]) -> list[FunnelRow]:
    """Images -> embedded -> image pairs -> candidate pairs -> each criterion's rejects in order -> kept."""
    rows = [
        FunnelRow("images in the dataset", 0, "embed.counts.images_in_dataset"),
        FunnelRow("images embedded", 0, "embed.counts.images_embedded"),
        FunnelRow("image neighbour pairs", 0, "mine.counts.image_pairs"),
        FunnelRow("candidate caption pairs", 0, "mine.counts.candidate_pairs"),
    ]
    rows = [FunnelRow(row.label, int(field(records, row.source)), row.source) for row in rows]
    rows[1] = FunnelRow(rows[1].label, rows[1].value, rows[1].source, share=percent(rows[1].value, rows[0].value))
    funnel = records["filter"]["funnel"]
    remaining = candidates = int(funnel["candidates"])
    for name in funnel["order"]:
        entry = funnel["criteria"][name]
        if entry["rejected_in_order"] is None:
            rows.append(
                FunnelRow(f"rejected by {name}", 0, "", rule="off", remaining=remaining,
                          remaining_share=percent(remaining, candidates))
            )  # fmt: skip
            continue
        remaining -= int(entry["rejected_in_order"])
        base = f"filter.funnel.criteria.{name}"
        note = f"computed for {funnel['cosine_scope']}" if name == "simcse_cosine" else ""
        rows.append(
            FunnelRow(
                f"rejected by {name}",
                int(entry["rejected_in_order"]),
                f"{base}.rejected_in_order",
                rule=entry["rule"],
                alone=int(entry["rejected_alone"]),
                alone_source=f"{base}.rejected_alone",
                remaining=remaining,
                note=note,
                share=percent(int(entry["rejected_in_order"]), candidates),
                remaining_share=percent(remaining, candidates),
            )
        )
    kept = int(funnel["kept"])
    share = percent(kept, candidates)
    rows.append(FunnelRow("kept pairs", kept, "filter.funnel.kept", remaining=kept, share=share, remaining_share=share))
    return rows
