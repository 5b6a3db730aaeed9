"""The dataset card (`README.md`) of a published C-STS dataset: YAML metadata that the Hugging Face Hub and
`datasets` read (licence, task, splits, sizes, which files hold which split), then the data statistics a C-STS
paper reports, in Markdown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import yaml

from csts_pipeline.pipeline.schemas import CSTS_SCHEMA
from csts_pipeline.stages.annotate.aggregation import model_workers, trust
from csts_pipeline.stages.annotate.aggregation.aggregators import aggregator_class
from csts_pipeline.stages.annotate.aggregation.em import interval, shift


@dataclass
class Release:
    """What the card describes: the splits, how the labels were made, agreement and the filter's funnel."""

    name: str
    license: str
    tables: dict[str, pa.Table]
    labels: dict[str, Any]
    agreement: dict[str, Any] | None = None
    design: dict[str, Any] | None = None
    funnel: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    soft_labels: dict[str, int] = field(default_factory=dict)  # file under annotations/ -> rows


@dataclass
class Histogram:
    """Label counts per split over shared bins: one per integer when every label is one, else half-points."""

    edges: np.ndarray
    labels: list[str]
    counts: dict[str, np.ndarray]


_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))


def size_category(rows: int) -> str:
    return next((name for limit, name in _SIZES if rows < limit), "1M<n<10M")


def metadata(release: Release, files: dict[str, str]) -> dict[str, Any]:
    """The card's YAML header: `configs` maps each split to its Parquet files, as `load_dataset(DIR)` expects."""
    total = sum(table.num_rows for table in release.tables.values())
    return {
        "license": release.license,
        "language": ["en"],
        "task_categories": ["sentence-similarity"],
        "task_ids": ["semantic-similarity-scoring"],
        "pretty_name": f"C-STS pairs from {release.name}",
        "size_categories": [size_category(total)],
        "tags": ["conditional-semantic-textual-similarity", "c-sts"],
        "configs": [
            {
                "config_name": "default",
                "data_files": [{"split": split, "path": f"{path.split('-')[0]}-*"} for split, path in files.items()],
            }
        ],
        "dataset_info": {
            "features": [{"name": f.name, "dtype": str(f.type).replace("double", "float64")} for f in CSTS_SCHEMA],
            "splits": [
                {"name": split, "num_bytes": int(table.nbytes), "num_examples": table.num_rows}
                for split, table in release.tables.items()
            ],
            "dataset_size": int(sum(table.nbytes for table in release.tables.values())),
        },
    }


def render_card(release: Release, stats: dict[str, Any], histogram: Histogram, png: str, files: dict[str, str]) -> str:
    """The whole card: front matter, then the statistics, the labels, agreement and the funnel."""
    header = yaml.safe_dump(metadata(release, files), sort_keys=False, allow_unicode=True)
    parts = [
        f"---\n{header}---\n",
        f"# C-STS pairs from {release.name}\n",
        "Conditional semantic textual similarity (C-STS): each instance is two sentences, a condition, and how "
        "similar the sentences are under that condition, from 1 (dissimilar) to 5 (similar). Every sentence pair "
        "comes twice, with a condition under which it is highly similar and one under which it is not. Built "
        "with csts-pipeline from image-caption pairs.\n",
        _statistics(stats),
        _histogram(histogram, png),
        _labels(release.labels),
        _agreement(release),
        _soft_labels(release.soft_labels),
        _funnel(release.funnel),
    ]
    if release.notes:
        parts.append("## Notes\n\n" + "".join(f"- {note}\n" for note in release.notes))
    return "\n".join(part for part in parts if part)


def _statistics(stats: dict[str, Any]) -> str:
    lines = ["## Data statistics\n", "| split | instances | sentence pairs |", "|---|---:|---:|"]
    lines += [f"| {split} | {n:,} | {stats['pairs'][split]:,} |" for split, n in stats["instances"].items()]
    lines.append(f"| **all** | {stats['total']:,} | {sum(stats['pairs'].values()):,} |")
    if stats["sentence_words"] is not None:
        lines.append(
            f"\nAverage length in words: sentences {stats['sentence_words']:.1f} (both sentences of every "
            f"instance), conditions {stats['condition_words']:.1f}.\n"
        )
    return "\n".join(lines)


def _histogram(histogram: Histogram, png: str) -> str:
    splits = list(histogram.counts)
    lines = ["## Label histogram\n", f"![Label histogram per split]({png})\n"]
    lines += ["| label | " + " | ".join(splits) + " |", "|---|" + "---:|" * len(splits)]
    for i, name in enumerate(histogram.labels):
        lines.append(f"| {name} | " + " | ".join(str(int(histogram.counts[s][i])) for s in splits) + " |")
    return "\n".join(lines) + "\n"


def _labels(labels: dict[str, Any]) -> str:
    low, high = labels.get("scale", [1, 5])
    return f"## Labels\n\nScale {low}-{high}: {labels['description']}.\n"


def _agreement(release: Release) -> str:
    found = release.agreement
    if found is None:
        return ""
    if release.labels["source"] == "bws":
        return _reliability(found, release.design)
    lines = ["## Agreement\n", "| measured on | items | Fleiss' kappa | alpha (ordinal) | alpha (interval) |"]
    lines.append("|---|---:|---:|---:|---:|")
    sample = found.get("sample")
    rows = [("every kept item with 2+ ratings", found)]
    if sample is not None:
        rows.append(
            (f"a random sample, {sample['ratings_each']} random ratings per item (seed {sample['seed']})", sample)
        )
    for scope, figures in rows:
        cells = [_show(figures.get(k)) for k in ("fleiss_kappa", "alpha_ordinal", "alpha_interval")]
        lines.append(f"| {scope} | {figures['items']} | " + " | ".join(cells) + " |")
    lines.append(f"\n{policy_sentence(found.get('label_policy', 'mean'))}")
    lines += _label_quality(found)
    return "\n".join(lines) + "\n"


def policy_sentence(policy: str) -> str:
    """How the labels were aggregated, as the policy's own class says it (aggregation/aggregators.py)."""
    return aggregator_class(policy).card


def _label_quality(found: dict[str, Any]) -> list[str]:
    """The high-against-low check and the workers, as far as the import measured them."""
    lines = []
    checked = found.get("high_low")
    if checked and checked["pairs"]:
        unsure = ""
        if checked.get("unsure_below") is not None:
            unsure = (
                f" and {checked['unsure']} more whose order the model holds less likely than {checked['unsure_below']}"
            )
        lines.append(
            f"\nHigh against low: of the {checked['pairs']:,} pairs with both conditions kept, {checked['inverted']:,} "
            f"have a high condition's label at or below the low one's{unsure}: an inversion rate of "
            f"{100 * checked['rate']:.1f}%."
        )
    workers = found.get("model_workers")
    if workers:
        gold = workers.get("gold_accuracy")
        spread = shift.spread_words(workers)
        lines.append(
            f"\nWorkers: {workers['workers']:,}, of whom {workers['unreliable']:,} answered close to at random "
            f"(reliability below {workers['unreliable_below']}). Gold accuracy: "
            + ("not measured (no gold items)." if gold is None else f"{gold:.3f} (workers kept).")
            + (f" The rater model's {spread}." if spread else "")
        )
        weights = trust.card_words(workers)
        intervals = interval.interval_words(workers.get("interval_calibrated_on"), workers.get("interval_checked_on"))
        lines.extend([f"\n{weights} {intervals}."] if weights else [])
        lines.extend(_model_share(workers.get("model_share")))
    hidden = found.get("gold")
    if hidden:
        lines.append(
            f"\nHidden gold: {hidden['answers']:,} answers to control items by {hidden['workers']:,} workers, "
            f"{hidden['accuracy']} right; {hidden['blocked']:,} worker(s) blocked by a sequential probability ratio "
            f"test (alpha {hidden['rule']['alpha']}, beta {hidden['rule']['beta']}) and their ratings left out."
        )
    return lines


def _model_share(share: dict[str, Any] | None) -> list[str]:
    """The card's sentence on models as raters (language and similarity models, each named with its kind and how
    its answers were read): human ratings bought, and what the models replaced."""
    if not share or not share.get("models"):
        return []
    each = "; ".join(f"`{m['worker_id']}`: {model_workers.describe(m)}" for m in share["models"])
    return [
        f"\nModels rated alongside people, weighed by the same rater model and never taken as truth: "
        f"{share['human_ratings']:,} human ratings were bought and the models' answers replaced "
        f"{model_workers.as_count(share['replaced_ratings'])} of them ({each})."
    ]


def _soft_labels(files: dict[str, int]) -> str:
    """Where the individual ratings and distributions are, and how to read them."""
    if not files:
        return ""
    lines = ["## Individual ratings and soft labels\n"]
    for path, rows in files.items():
        what = (
            "every rating of the published items (`item_id`, `pair_id`, `condition_type`, `worker`, `rating`, "
            "`not_pertinent`); workers are pseudonyms, a keyed hash of the platform's id with a salt kept private"
            if path.endswith("ratings.parquet")
            else "each item's posterior over the labels 1-5 (`distribution`), its 90% interval "
            "(`interval_low`, `interval_high`) and P(not pertinent)"
        )
        lines.append(f"- `{path}` ({rows:,} rows): {what}.")
    lines.append(
        '\nThey are not part of the default configuration; read them with `load_dataset("parquet", '
        'data_files="annotations/ratings.parquet")` or pyarrow.'
    )
    return "\n".join(lines) + "\n"


def _reliability(found: dict[str, Any], design: dict[str, Any] | None) -> str:
    lines = ["## Reliability (Best-Worst Scaling)\n"]
    if design is not None:
        lines.append(
            f"{design['tuples']:,} 4-tuples of {design['items']:,} items; each item in "
            f"{design['appearances_min']}-{design['appearances_max']} tuples; no two items share more than "
            f"{design['max_cooccurrence']}.\n"
        )
    lines.append(
        f"Split-half reliability (Spearman between the scores of random halves of each tuple's answers, mean of "
        f"{found['repeats']} splits): {_show(found['spearman'])}; Spearman-Brown corrected: "
        f"{_show(found['spearman_brown'])}.\n"
    )
    return "\n".join(lines)


def _funnel(funnel: dict[str, Any] | None) -> str:
    """The filter's funnel: every criterion in order with what it removed and what remained."""
    if funnel is None:
        return ""
    lines = ["## Filter funnel\n", f"{funnel['candidates']:,} candidate caption pairs, criteria applied in order:\n"]
    lines += ["| criterion | rule | rejected | remaining |", "|---|---|---:|---:|"]
    remaining = funnel["candidates"]
    for name in funnel["order"]:
        entry = funnel["criteria"][name]
        if entry["rejected_in_order"] is None:
            lines.append(f"| {name} | off | - | {remaining:,} |")
            continue
        remaining -= entry["rejected_in_order"]
        lines.append(f"| {name} | {entry['rule']} | {entry['rejected_in_order']:,} | {remaining:,} |")
    lines.append(f"| **kept** | | | {funnel['kept']:,} |")
    return "\n".join(lines) + "\n"


def _show(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
