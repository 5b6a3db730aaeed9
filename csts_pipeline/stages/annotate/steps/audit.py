"""`annotate audit` as a step: audit.json and a readable audit.md in the output folder, replaced together, and the
lines the command prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import file_fingerprint
from csts_pipeline.pipeline.shards import write_atomic
from csts_pipeline.stages.annotate.crowd.files import write_json
from csts_pipeline.stages.annotate.labels.audit_stats import audit
from csts_pipeline.stages.annotate.layout import AUDIT_JSON

AUDIT_MD = "audit.md"


def run_audit(labels: Path, reference: Path, out: Path, *, seed: int, force: bool) -> dict[str, Any]:
    """Audit `labels` against `reference` into `out` (a no-op when both files and the seed are unchanged)."""
    inputs = {}
    for name, path in (("labels", labels), ("reference", reference)):
        if not path.is_file():
            raise UserError(f"{path}: not found")
        inputs[name] = file_fingerprint(path)
    with OutputFolder("annotate-audit", out, {"seed": seed}, inputs) as step:
        if step.up_to_date() and not force:
            return step.unchanged()
        result = audit(labels, reference, seed)
        step.begin(force=True)
        write_json(step.staging / AUDIT_JSON, result)
        text = render(result)
        write_atomic(step.staging / AUDIT_MD, lambda handle: handle.write(text.encode()))
        files = {"json": str(out / AUDIT_JSON), "summary": str(out / AUDIT_MD)}
        counts = {"matched": result["matched"], "rejected_by_reference": result["rejected_by_reference"]}
        return step.finish(counts, audit=result, files=files)


def _show(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _interval(found: dict[str, Any], name: str) -> str:
    bounds = found.get("interval_95", {}).get(name)
    return "" if bounds is None else f" (95% CI {bounds[0]:.3f} to {bounds[1]:.3f})"


def headline(result: dict[str, Any]) -> list[str]:
    """The audit's main figures in a few lines (printed, and at the top of audit.md)."""
    found = result["agreement"]
    unmatched = result["unmatched"]
    return [
        f"{result['matched']} rows matched by {result['aligned_by']}; unmatched: {unmatched['labels']} of the labels, "
        f"{unmatched['reference']} of the reference",
        f"conditions rejected by the reference: {result['rejected_by_reference']} ({_share(result['rejected_share'])})",
        f"on {found['rows']} rows compared: exact agreement {_share(found.get('exact_agreement'))}, differ by >= 1 "
        f"{_share(found.get('differ_by_1_or_more'))}, by >= 2 {_share(found.get('differ_by_2_or_more'))}",
        f"Spearman {_show(found.get('spearman'))}{_interval(found, 'spearman')}, Pearson "
        f"{_show(found.get('pearson'))}{_interval(found, 'pearson')}, Krippendorff's alpha (ordinal) "
        f"{_show(found.get('alpha_ordinal'))}",
        *_uneven(result.get("uneven_pairs", 0)),
    ]


def _uneven(pairs: int) -> list[str]:
    """The warning for pairs matched by position whose rows differ in number between the files."""
    if not pairs:
        return []
    return [
        f"warning: {pairs} sentence pair(s) have a different number of rows in the two files; their rows were "
        "matched by position and may be the wrong ones: give both files an id column (id or item_id)"
    ]


def render(result: dict[str, Any]) -> str:
    """audit.md: the headline, the breakdown by kind of condition, the most disputed rows."""
    lines = [
        "# Audit against a re-annotation\n",
        f"Labels: `{result['labels']}`; reference: `{result['reference']}`.\n",
    ]
    lines += [f"- {line}" for line in headline(result)]
    lines.append(
        f"\nExact agreement compares both labels rounded to an integer (halves up); the intervals are percentile "
        f"bootstrap intervals over {result['bootstrap_draws']} resamples of the rows (seed {result['seed']}).\n"
    )
    lines += ["## By kind of condition\n", "| kind | matched | rejected | compared | exact | differ >= 2 | Spearman |"]
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for kind, found in result["by_condition_kind"].items():
        lines.append(
            f"| {kind} | {found['matched']} | {found['rejected']} | {found['rows']} | "
            f"{_share(found.get('exact_agreement'))} | {_share(found.get('differ_by_2_or_more'))} | "
            f"{_show(found.get('spearman'))} |"
        )
    lines.append("\nA condition's kind is the first of these keyword lists that shares a word with it (else other):\n")
    lines += [f"- {kind}: {', '.join(keys)}" for kind, keys in result["condition_kinds"].items()]
    lines += ["\n## Most disputed rows\n", "| row | condition | reference condition | label | reference |"]
    lines.append("|---:|---|---|---:|---:|")
    for row in result["most_disputed"]:
        lines.append(
            f"| {row['row']} | {row['condition']} | {row['reference_condition']} | {row['label']:g} | "
            f"{row['reference_label']:g} |"
        )
    return "\n".join(lines) + "\n"


def describe_audit(record: dict[str, Any]) -> str:
    """What the command prints."""
    if record.get("status") == "up-to-date":
        return f"up to date: {record['folder']} (nothing to do; --force recomputes)"
    files = record["files"]
    return "\n".join([*headline(record["audit"]), f"  {files['json']}", f"  {files['summary']}"])
