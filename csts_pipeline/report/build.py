"""Build the report: read the records and bounded samples, draw the figures, make the thumbnails, render the
template (report/templates/index.html, jinja2 with autoescaping) and put the page and its files in place.

The page's files go in a folder beside it (`index.html` -> `index_files/`), committed whole by
`pipeline.commit.OutputFolder` (locked, staged, recorded, swapped in) before the page itself is written
atomically, so a failed run leaves the previous report as it was."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow as pa

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.manifest import Manifest
from csts_pipeline.pipeline.records import read_json
from csts_pipeline.pipeline.schemas import KEPT
from csts_pipeline.pipeline.shards import write_atomic
from csts_pipeline.report.annotations import annotation_summary
from csts_pipeline.report.audit import audit_summary
from csts_pipeline.report.bands import threshold_bands
from csts_pipeline.report.compare import compare_runs
from csts_pipeline.report.funnel import funnel_rows, read_records
from csts_pipeline.report.plots import distributions
from csts_pipeline.report.samples import (
    SHOWN,
    criteria_of,
    image_cosine_histogram,
    iter_batches,
    kept_sample,
    rejected_batches,
)
from csts_pipeline.report.thumbnails import SIZE, thumbnails
from csts_pipeline.stages.annotate.layout import condition_task_id


@dataclass(frozen=True)
class ReportOptions:
    """How much the page shows: kept pairs per stratum (4 strata), pairs per side of each threshold band,
    candidates sampled when filter/rejected/ is absent, the seed of every sample, and another run to compare."""

    per_stratum: int = 4
    near: int = 6
    candidate_sample: int = 50_000
    seed: int = 0
    compare: Path | None = None


def files_folder(page: Path) -> Path:
    """The folder of the page's images: `index.html` -> `index_files/`, as browsers save a page."""
    return page.with_name(f"{page.stem}_files")


def build_report(manifest: Manifest, page: Path, options: ReportOptions = ReportOptions()) -> dict[str, Any]:
    """Write the report page of the manifest's run to `page`; returns what the command prints."""
    work_dir = manifest.work_dir
    records = read_records(work_dir)
    folder = files_folder(page)
    page.parent.mkdir(parents=True, exist_ok=True)
    inputs = {name: record["fingerprint"] for name, record in records.items() if record}
    if options.compare is not None:
        inputs |= {f"compare-{name}": r["fingerprint"] for name, r in read_records(options.compare).items()}
    params = {"per_stratum": options.per_stratum, "near": options.near, "seed": options.seed}
    params |= {"candidate_sample": options.candidate_sample, "compare": str(options.compare or "")}
    with OutputFolder("report", folder, params, inputs) as out:
        out.begin(force=True)
        html, shown = _build(manifest, records, out.staging, folder.name, options)
        out.finish({"kept_shown": shown["kept"], "images": shown["images"]})
        write_atomic(page, lambda handle: handle.write(html.encode()))
    return {
        "page": page,
        "files": folder,
        "kept_shown": shown["kept"],
        "images": shown["images"],
        "near": shown["near"],
        "compare": options.compare,
    }


def _build(
    manifest: Manifest, records: dict[str, Any], staging: Path, files: str, options: ReportOptions
) -> tuple[str, dict[str, Any]]:
    """Draw the figures and thumbnails into `staging`; the page's HTML and what it shows."""
    work_dir = manifest.work_dir
    histograms = read_json(work_dir / "filter" / "histograms.json")
    criteria = criteria_of(records["filter"])
    figures = distributions(histograms, image_cosine_histogram(work_dir), criteria, staging)
    kept, kept_metric = kept_sample(work_dir / "filter", histograms, options.per_stratum, options.seed)
    rejected, source, cosine_note = rejected_batches(work_dir, records, options.candidate_sample, options.seed)
    kept_tables = (pa.Table.from_batches([batch]) for batch in iter_batches(work_dir / "filter" / KEPT, SHOWN))
    bands = threshold_bands(criteria, histograms, kept_tables, rejected, options.near)
    shown = [pair for pairs in [kept, *(b.kept + b.rejected for b in bands)] for pair in pairs]
    image_ids = {pair[key] for pair in shown for key in ("image_id_1", "image_id_2")}
    thumbs = thumbnails(manifest.data, work_dir / "embed", image_ids, staging / "thumbs")
    context = {
        "name": manifest.name,
        "demo_encoders": manifest.demo_encoders,
        "work_dir": str(work_dir),
        "made": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "funnel": funnel_rows(records),
        "cosine_scope": records["filter"]["funnel"]["cosine_scope"],
        "figures": figures,
        "kept": kept,
        "kept_metric": kept_metric,
        "kept_total": records["filter"]["funnel"]["kept"],
        "bands": bands,
        "near_source": source,
        "cosine_note": cosine_note,
        "criteria": {name: criteria.rule(name) for name in criteria.active()},
        "thumbs": {image_id: f"{files}/thumbs/{name}" for image_id, name in thumbs.items()},
        "files": files,
        "thumb_size": SIZE,
        "annotations": annotation_summary(work_dir / "annotate", staging),
        "audit": audit_summary(work_dir / "annotate"),
        "compare": None if options.compare is None else compare_runs(records, options.compare, histograms, staging),
    }
    return render(context), {"kept": len(kept), "images": len(thumbs), "near": source}


def render(context: dict[str, Any]) -> str:
    """The one renderer: the packaged template with autoescaping (captions are data, never markup)."""
    import jinja2

    template = resources.files("csts_pipeline.report").joinpath("templates/index.html").read_text(encoding="utf-8")
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    environment.filters["n"] = lambda value: "-" if value is None else f"{value:,}"
    environment.filters["f3"] = lambda value: "-" if value is None or value != value else f"{value:.3f}"
    environment.filters["cid"] = condition_task_id  # the pair's id as annotate names its condition task
    return environment.from_string(template).render(**context)
