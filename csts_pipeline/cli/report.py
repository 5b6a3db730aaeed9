"""`csts-pipeline report`: a static HTML page to inspect a run (report/, docs/report.md). cli/__init__.py registers
it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from csts_pipeline.cli.options import DatasetOpt, ManifestOpt, user_errors
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import open_manifest
from csts_pipeline.pipeline.urls import location


def report(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    out: Annotated[
        str | None, typer.Option("--out", help="The run's work folder, as for run and the stages (overrides work_dir).")
    ] = None,
    page: Annotated[
        Path | None,
        typer.Option("--page", help="The page to write (default <work_dir>/report/index.html); images go beside it."),
    ] = None,
    per_stratum: Annotated[int, typer.Option(min=1, help="Kept pairs shown per sentence-cosine quartile.")] = 4,
    near: Annotated[
        int, typer.Option(min=1, help="Pairs shown on each side (kept, rejected) of each threshold's band.")
    ] = 6,
    candidate_sample: Annotated[
        int, typer.Option(min=1, help="Candidates scored for the near misses when filter/rejected/ is absent.")
    ] = 50_000,
    seed: Annotated[int, typer.Option(help="Seed of the samples.")] = 0,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare",
            metavar="OTHER_RUN",
            help="The work folder of another run of the same data: its funnel and distributions shown beside these.",
        ),
    ] = None,
) -> None:
    """Write a static page of a run: the funnel, the metric distributions, kept pairs and the pairs on both sides
    of each threshold, with thumbnails; the annotation summary when there is one; another run beside it with
    --compare."""
    from csts_pipeline.report.build import ReportOptions, build_report

    if dataset is None and manifest is None:
        raise UserError("give --dataset NAME or --manifest PATH (the run to report on)")
    loaded = open_manifest(dataset, manifest, {"work_dir": location(out)})
    loaded.fetch_inputs()
    page = page.resolve() if page is not None else loaded.work_dir / "report" / "index.html"
    other = None if compare is None else Path(compare).resolve()
    if other is not None and not other.is_dir():
        raise UserError(f"--compare {compare}: not a folder (give the work folder of another run)")
    result = build_report(loaded, page, ReportOptions(per_stratum, near, candidate_sample, seed, other))
    compared = f"\n  compared with {result['compare']}" if result["compare"] else ""
    typer.echo(
        f"report: {result['page']}\n  {result['images']} thumbnails, {result['kept_shown']} kept pairs shown; "
        f"rejected pairs from {result['near']}{compared}"
    )


def register(app: typer.Typer) -> None:
    app.command("report")(user_errors(report))
