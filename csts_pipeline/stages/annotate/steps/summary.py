"""What a step did, as the command line prints it: counts, problems, agreement and where the files are.

The docs' worked example shows this text verbatim (a test runs it), so wording changes go there too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from csts_pipeline.stages.annotate.aggregation import model_workers, trust
from csts_pipeline.stages.annotate.aggregation.em import interval, shift
from csts_pipeline.stages.annotate.layout import AGREEMENT, INVERSIONS, ITEMS, SPLITS, WORKERS


def describe(record: dict[str, Any]) -> str:
    """A step's stage record as a few printable lines."""
    stage = record["stage"]
    if stage == "annotate-export-conditions":
        return _export_conditions(record["counts"], record["files"])
    if stage == "annotate-export-ratings":
        return _export_ratings(record["counts"], record["files"])
    if stage == "annotate-split":
        return _split(record["counts"], record["files"], record.get("labels"))
    if stage == "annotate-import-conditions":
        return _import_conditions(record)
    if stage == "annotate-export-bws":
        return _export_bws(record["counts"], record["design"], record["files"])
    if stage == "annotate-import-bws":
        return _import_bws(record)
    if stage == "annotate-export-qualification":
        return _export_qualification(record)
    if stage == "annotate-import-qualification":
        return _import_qualification(record)
    return _import_ratings(record)


def _export_conditions(counts: dict[str, Any], files: dict[str, str]) -> str:
    return (
        f"{counts['tasks']} condition-writing tasks sampled from {counts['unique_pairs']} kept pairs over "
        f"{counts['strata']} strata\n  upload: {files['hits']}\n  ids:    {files['tasks']}\n  page:   {files['page']}"
    )


def _export_ratings(counts: dict[str, Any], files: dict[str, str]) -> str:
    gold = ""
    if counts.get("gold_items"):
        gold = (
            f"\n  hidden gold: {counts['gold_items']} control rows ({counts['gold_share']:.1%} of the batch) -> "
            f"{files['gold']} (keep it private)"
        )
    return (
        f"{counts['items']} rating tasks ({counts['pairs']} pairs x high/low)\n"
        f"  upload: {files['hits']}\n  ids:    {files['tasks']}\n  page:   {files['page']}{gold}"
    )


def _export_qualification(record: dict[str, Any]) -> str:
    counts, files = record["counts"], record["files"]
    return (
        f"qualification test of {counts['write_items']} condition-writing and {counts['rate_items']} rating items "
        f"from {record['gold']}\n  upload: {files['hits']} (one HIT; one assignment per worker tested)\n"
        f"  gold:   {files['tasks']}\n  page:   {files['page']}"
    )


def _import_qualification(record: dict[str, Any]) -> str:
    counts, files = record["counts"], record["files"]
    return (
        f"{_screening(record)}\n{counts['workers']} workers scored, {counts['qualified']} qualified (mean rating "
        f"error at most {record['max_rating_error']:g} and every condition passing the checks; "
        f"{counts['manual_verdicts']} manual verdicts) -> {files['workers']}\n"
        f"  answers: {files['answers']}\n  grant:   {files['grant']} (MTurk: Manage > Workers > Upload CSV)"
    )


def _export_bws(counts: dict[str, Any], design: dict[str, Any], files: dict[str, str]) -> str:
    appearances = f"{design['appearances_min']}" + (
        f"-{design['appearances_max']}" if design["appearances_max"] != design["appearances_min"] else ""
    )
    return (
        f"{counts['tuples']} best-worst 4-tuples of {counts['items']} items (each item in {appearances} tuples; "
        f"no two items share more than {design['max_cooccurrence']})\n"
        f"  upload: {files['hits']}\n  ids:    {files['tasks']}\n  page:   {files['page']}"
    )


def _import_bws(record: dict[str, Any]) -> str:
    counts, files, reliability = record["counts"], record["files"], record["reliability"]
    spread = ", ".join(f"{n} with {k}" for k, n in reliability["annotations_per_tuple"].items())
    if reliability["spearman"] is None:
        half = "split-half reliability n/a (no tuple has two or more answers)"
    else:
        half = (
            f"split-half reliability (Spearman, mean of {reliability['repeats']} random splits, seed "
            f"{reliability['seed']}) {reliability['spearman']:.3f}; Spearman-Brown corrected "
            f"{reliability['spearman_brown']:.3f}"
        )
    return "\n".join(
        [
            _screening(record),
            f"{counts['tuples_answered']} of {counts['tuples']} tuples answered ({spread} answers) by "
            f"{counts['workers']} workers",
            f"items: {counts['items_scored']} scored, {counts['items_unanswered']} unanswered -> {files[ITEMS]}",
            half,
        ]
    )


def _split(counts: dict[str, Any], files: dict[str, str], labels: dict[str, Any] | None) -> str:
    lines = [
        f"{counts['sentence_pairs']} sentence pairs split; {counts['incomplete_pairs_dropped']} pair(s) left out "
        "(not both conditions kept)"
    ]
    if labels is not None:
        lines.append(f"labels: {labels['description']}")
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
    spread = ", ".join(f"{n} with {k} ratings" for k, n in agreement["ratings_per_item"].items()) or "none"
    lines = [
        _screening(record),
        f"items: {counts['items_kept']} kept, {counts['items_not_pertinent']} not pertinent, "
        f"{counts['items_too_few_ratings']} too few ratings, {counts['items_unanswered']} unanswered "
        f"-> {files[ITEMS]} (labels: {agreement['label_policy']})",
        f"{_figures(agreement)} over {agreement['items']} items with 2+ ratings ({spread}); {files[AGREEMENT]}",
    ]
    sample = agreement.get("sample")
    if sample is not None:
        lines.append(
            f"sample of {sample['items']} items (asked {sample['asked']}, seed {sample['seed']}), "
            f"{sample['ratings_each']} ratings each: {_figures(sample)}"
        )
    lines.append(_high_low(agreement.get("high_low"), files.get(INVERSIONS)))
    for m in agreement.get("models", []):
        lines.append(f"model {m['worker_id']}: {m['model_kind']}, {m['model_reading']}")
    model = agreement.get("model_workers")
    if model is not None:
        spread = shift.spread_words(model) + shift.evidence_words(model)
        lines.append(
            f"ordinal model: {model['workers']} workers, {model['unreliable']} unreliable (reliability below "
            f"{model['unreliable_below']}{_pooled(model)}){'; ' + spread if spread else ''} -> {files[WORKERS]}"
        )
        lines.extend([f"  {trust.summary_words(model)}"] if model.get("trust") else [])
        lines.append(_convergence(model))
        set_by = interval.interval_words(model.get("interval_calibrated_on"), model.get("interval_checked_on"))
        lines.append(f"  {set_by}")
        lines.extend(model_share_lines(model.get("model_share")))
    gold = agreement.get("gold")
    if gold is not None:
        rule = gold["rule"]
        lines.append(
            f"hidden gold: {gold['answers']} answers by {gold['workers']} workers, {gold['accuracy']} right; "
            f"SPRT (H0 P(right) {rule['h0_p_right']}, H1 {rule['h1_p_right']}, alpha {rule['alpha']}, beta "
            f"{rule['beta']}): {gold['blocked']} blocked, {gold['cleared']} cleared, {gold['undecided']} undecided "
            f"-> {files['blocklist']}"
        )
    return "\n".join([*lines, agreement_table(agreement)])


def _pooled(model: dict[str, Any]) -> str:
    """Where the items of known label measured the people, the noise that marks them unreliable is one pooled
    figure: said, since it marks every person alike, those with no rating on those items too."""
    if not (model.get("trust") or {}).get("people_pooled"):
        return ""
    return "; the people's noise is measured pooled on the items of known label, so it judges every person alike"


def _convergence(model: dict[str, Any]) -> str:
    """Whether the rater model's EM converged, in a line."""
    if model.get("converged", True):
        return f"  EM converged after {model['em_iterations']} iterations"
    return f"  EM did NOT converge in {model['em_iterations']} iterations: the labels are where it stopped"


def model_share_lines(share: dict[str, Any] | None) -> list[str]:
    """What the models gave: the human ratings bought, and per model its answers, reliability, flag skill, gold,
    weak kinds and the human ratings its answers replaced (quality.model_share); nothing without a model worker."""
    if not share or not share.get("models"):
        return []
    lines = [
        f"human ratings bought: {share['human_ratings']:,}; the models' answers replaced "
        f"{model_workers.as_count(share['replaced_ratings'])} of them"
    ]
    lines.extend(f"  {m['worker_id']}: {model_workers.describe(m)}" for m in share["models"])
    return lines


def _high_low(found: dict[str, Any] | None, path: str | None) -> str:
    """The high-against-low check in a line: pairs inverted, and unsure ones when the model gave probabilities."""
    if not found or not found["pairs"]:
        return "high vs low: no pair with both conditions kept"
    unsure = f", {found['unsure']} unsure (P(high > low) < {found['unsure_below']})" if found["unsure_below"] else ""
    return f"high vs low: {found['inverted']} of {found['pairs']} pairs inverted (high label <= low){unsure} -> {path}"


def _figures(agreement: dict[str, Any]) -> str:
    """Fleiss' kappa and Krippendorff's alpha (ordinal, interval), `n/a` where undefined."""

    def show(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    return (
        f"Fleiss' kappa {show(agreement['fleiss_kappa'])}, Krippendorff's alpha ordinal "
        f"{show(agreement['alpha_ordinal'])}, interval {show(agreement['alpha_interval'])}"
    )


def agreement_table(agreement: dict[str, Any], limit: int = 20) -> str:
    """The per-worker agreement as a printable table, least agreeing workers first; `low` marks a worker whose
    leave-one-out Spearman is below the flag threshold."""
    workers = agreement["workers"]
    lines = [f"{'worker':<20} {'items':>6} {'spearman':>9} {'mean|diff|':>11} {'within 1':>9}  flag"]
    for w in workers[:limit]:
        rho = "-" if w["spearman"] is None else f"{w['spearman']:.3f}"
        flag = f"  < {agreement['flag_below']}" if w["flagged"] else ""
        lines.append(
            f"{w['worker_id'][:20]:<20} {w['items']:>6} {rho:>9} {w['mean_abs_diff']:>11.3f} {w['within_1']:>9.3f}"
            + flag
        )
    if len(workers) > limit:
        lines.append(f"... {len(workers) - limit} more workers in agreement.json")
    flagged = sum(w["flagged"] for w in workers)
    lines.append(f"{flagged} worker(s) flagged (leave-one-out Spearman below {agreement['flag_below']})")
    return "\n".join(lines)
