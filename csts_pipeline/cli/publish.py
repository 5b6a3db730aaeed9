"""`csts-pipeline export`: publish the split C-STS files as a dataset folder (steps.publish).
cli/__init__.py registers the command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from csts_pipeline.cli.options import DatasetOpt, ManifestOpt, user_errors
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import open_manifest


def export(
    out: Annotated[Path, typer.Option("--out", help="The dataset folder to write (README.md card, data/*.parquet).")],
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    annotate_dir: Annotated[
        Path | None,
        typer.Option("--annotate", help="The annotate folder to publish from (default: <work_dir>/annotate/)."),
    ] = None,
    format_: Annotated[
        str, typer.Option("--format", help="hf: a Hugging Face dataset folder that datasets.load_dataset(DIR) loads.")
    ] = "hf",
    license_: Annotated[
        str, typer.Option("--license", help="Licence id for the card (Hub ids: cc-by-4.0, mit, ...); default other.")
    ] = "other",
    name: Annotated[
        str | None, typer.Option("--name", help="Dataset name in the card (default: the manifest's name).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", metavar="", help="Write into a non-empty folder, replacing card and data.")
    ] = False,
) -> None:
    """Publish <work_dir>/annotate/csts/ as a dataset: Parquet per split, a card with statistics and a plot."""
    from csts_pipeline.stages.annotate.steps.publish import FORMATS, export_hf

    if format_ not in FORMATS:
        raise UserError(f"--format {format_!r}: expected {' or '.join(FORMATS)}")
    if dataset is None and manifest is None:
        if annotate_dir is None:
            raise UserError("give --dataset/--manifest (publishes <work_dir>/annotate/) or --annotate DIR")
        work_dir, label = None, annotate_dir.resolve().name
    else:
        loaded = open_manifest(dataset, manifest)
        work_dir, label = loaded.work_dir, loaded.name
        annotate_dir = annotate_dir or work_dir / "annotate"
    result = export_hf(annotate_dir, work_dir, out, name=name or label, license=license_, force=force)
    rows = ", ".join(f"{split} {n}" for split, n in result["rows"].items())
    typer.echo(f"{result['out']}: {rows} rows\n  card: {result['card']}\n  plot: {result['histogram']}")


def register(app: typer.Typer) -> None:
    app.command("export")(user_errors(export))
