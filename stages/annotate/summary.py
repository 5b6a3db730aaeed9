"""What a step did, as the command line prints it: counts, problems, agreement and where the files are.

docs/annotate.md's worked example shows this text verbatim (a test runs it), so wording changes go there too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stages.annotate.layout import AGREEMENT, ITEMS, SPLITS


def describe(record: dict[str, Any]) -> str:
    """A step's stage record (or its up-to-date note) as a few printable lines."""
    if record.get("status") == "up-to-date":
        return f"up to date: {record['folder']} (nothing to do; --force recomputes)"
    stage = record["stage"]
    if stage == "annotate-export-conditions":
        return _export_conditions(record["counts"], record["files"])
    if stage == "annotate-export-ratings":
        return _export_ratings(record["counts"], record["files"])
    if stage == "annotate-split":
        return _split(record["counts"], record["files"])
    if stage == "annotate-import-conditions":
        return _import_conditions(record)
    return _import_ratings(record)


def _export_conditions(counts: dict[str, Any], files: dict[str, str]) -> str:
    return (
        f"{counts['tasks']} condition-writing tasks sampled from {counts['unique_pairs']} kept pairs over "
        f"{counts['strata']} strata\n  upload: {files['hits']}\n  ids:    {files['tasks']}"
    )


def _export_ratings(counts: dict[str, Any], files: dict[str, str]) -> str:
    return (
        f"{counts['items']} rating tasks ({counts['pairs']} pairs x high/low)\n"
        f"  upload: {files['hits']}\n  ids:    {files['tasks']}"
    )


def _split(counts: dict[str, Any], files: dict[str, str]) -> str:
    lines = [
        f"{counts['sentence_pairs']} sentence pairs split; {counts['incomplete_pairs_dropped']} pair(s) left out "
        "(not both conditions kept)"
    ]
    lines += [f"  {name:<10} {counts[f'{name}_rows']:>6} rows  {files[name]}" for name in SPLITS]
    return "\n".join(lines)


def _screening(record: dict[str, Any]) -> str:
    """The first line of both imports: rows read and excluded, per problem, and the report's path."""
    counts = record["counts"]
    problems = ", ".join(f"{name} {n}" for name, n in record["problems"].items()) or "none"
    header = f"{counts['rows_read']} rows read, {counts['excluded_rows']} excluded ({problems}); "
    return header + f"report: {record['files']['report']}"


def _import_conditions(record: dict[str, Any]) -> str:
    counts, files = record["counts"], record["files"]
    return (
        f"{_screening(record)}\n{counts['accepted']} of {counts['tasks']} tasks answered -> {counts['triplets']} "
        f"(s1, s2, c) triplets in {files['conditions']}"
    )


def _import_ratings(record: dict[str, Any]) -> str:
    counts, files = record["counts"], record["files"]
    agreement = json.loads(Path(files[AGREEMENT]).read_text())
    kappa = "n/a" if agreement["fleiss_kappa"] is None else f"{agreement['fleiss_kappa']:.3f}"
    spread = ", ".join(f"{n} with {k} ratings" for k, n in agreement["ratings_per_item"].items()) or "none"
    return "\n".join(
        [
            _screening(record),
            f"items: {counts['items_kept']} kept, {counts['items_not_pertinent']} not pertinent, "
            f"{counts['items_too_few_ratings']} too few ratings, {counts['items_unanswered']} unanswered "
            f"-> {files[ITEMS]}",
            f"Fleiss' kappa {kappa} over {agreement['items']} items with 2+ ratings ({spread}); {files[AGREEMENT]}",
            agreement_table(agreement),
        ]
    )


def agreement_table(agreement: dict[str, Any], limit: int = 20) -> str:
    """The per-worker agreement as a printable table, least agreeing workers first."""
    workers = agreement["workers"]
    lines = [f"{'worker':<20} {'items':>6} {'spearman':>9} {'mean|diff|':>11} {'within 1':>9}"]
    for w in workers[:limit]:
        rho = "-" if w["spearman"] is None else f"{w['spearman']:.3f}"
        lines.append(
            f"{w['worker_id'][:20]:<20} {w['items']:>6} {rho:>9} {w['mean_abs_diff']:>11.3f} {w['within_1']:>9.3f}"
        )
    if len(workers) > limit:
        lines.append(f"... {len(workers) - limit} more workers in agreement.json")
    return "\n".join(lines)
