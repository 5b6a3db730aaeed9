"""The audit section, when `annotate audit` has written `<work_dir>/annotate/audit/audit.json` (`annotate audit
--out <work_dir>/annotate/audit`, docs/annotate.md): the labels against a re-annotation, read from that file,
never recomputed. Only a finished audit counts (its stage record is there), so a half-written one is not shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.records import read_json, read_record
from csts_pipeline.stages.annotate.layout import AUDIT_FOLDER, AUDIT_JSON

DISPUTED_SHOWN = 5


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _number(value: float | None, interval: list[float] | None = None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" + ("" if interval is None else f" ({interval[0]:.3f} to {interval[1]:.3f})")


def audit_summary(annotate_dir: Path) -> dict[str, Any] | None:
    """What the page shows of the audit: the headline figures (each with the audit.json key it comes from), the
    breakdown by kind of condition and the most disputed rows; None without a finished audit."""
    folder = annotate_dir / AUDIT_FOLDER
    if read_record(folder) is None or not (folder / AUDIT_JSON).is_file():
        return None
    result = read_json(folder / AUDIT_JSON)
    found, intervals = result["agreement"], result["agreement"].get("interval_95", {})
    figures = [
        ("matched", "rows matched (by " + result["aligned_by"] + ")", f"{result['matched']:,}"),
        ("unmatched.labels", "labels without a reference row", f"{result['unmatched']['labels']:,}"),
        ("rejected_by_reference", "conditions the reference rejected", f"{result['rejected_by_reference']:,}"),
        ("agreement.rows", "rows compared", f"{found['rows']:,}"),
        ("agreement.exact_agreement", "exact agreement", _share(found.get("exact_agreement"))),
        ("agreement.differ_by_1_or_more", "differ by 1 or more", _share(found.get("differ_by_1_or_more"))),
        ("agreement.differ_by_2_or_more", "differ by 2 or more", _share(found.get("differ_by_2_or_more"))),
        ("agreement.spearman", "Spearman (95% CI)", _number(found.get("spearman"), intervals.get("spearman"))),
        ("agreement.pearson", "Pearson (95% CI)", _number(found.get("pearson"), intervals.get("pearson"))),
        ("agreement.alpha_ordinal", "Krippendorff's alpha (ordinal)", _number(found.get("alpha_ordinal"))),
    ]
    kinds = [
        (kind, k["matched"], k["rejected"], _share(k.get("exact_agreement")), _number(k.get("spearman")))
        for kind, k in result["by_condition_kind"].items()
    ]
    return {
        "file": str(folder / AUDIT_JSON),
        "labels": result["labels"],
        "reference": result["reference"],
        "figures": figures,
        "kinds": kinds,
        "disputed": result["most_disputed"][:DISPUTED_SHOWN],
    }
