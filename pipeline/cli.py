"""The `csts-pipeline` command line (typer). Each command loads a manifest, applies CLI overrides and calls
one stage's `run`; user mistakes become a one-line error and exit status 2."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from pipeline.errors import UserError
from pipeline.manifest import Manifest, load_manifest, manifest_path
from pipeline.records import read_record

app = typer.Typer(
    help="Build C-STS datasets from image-caption corpora: embed -> mine -> filter -> train.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
log = logging.getLogger("csts-pipeline")

DatasetOpt = Annotated[
    str | None,
    typer.Option("--dataset", "-d", help="Manifest name: manifests/NAME.yaml (coco, flickr30k, sample)."),
]
ManifestOpt = Annotated[Path | None, typer.Option("--manifest", "-m", help="Path to any manifest YAML file.")]
DeviceOpt = Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:N (overrides run.device).")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Work folder for all stage outputs (overrides work_dir).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Recompute even when the stage's output is up to date.")]
BatchOpt = Annotated[int | None, typer.Option(help="Images per batch for embed (overrides embed.batch_size).")]
KOpt = Annotated[int | None, typer.Option("--k", help="Neighbours per image (overrides mine.k).")]


def _user_errors(command: Callable[..., None]) -> Callable[..., None]:
    """Print a user mistake as one line and exit 2, instead of a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        for ours in ("pipeline", "stages"):
            logging.getLogger(ours).setLevel(logging.INFO)
        try:
            command(*args, **kwargs)
        except UserError as exc:
            typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2) from None

    return wrapper


def _manifest(dataset: str | None, manifest: Path | None, **overrides: Any) -> Manifest:
    loaded = load_manifest(manifest_path(dataset, manifest), overrides)
    if loaded.demo_encoders:
        typer.secho(
            f"note: {loaded.name} uses demo encoders (random-init CLIP, all-MiniLM-L6-v2): it shows the "
            "mechanics, not the neighbours or similarities of real models.",
            fg=typer.colors.YELLOW,
        )
    return loaded


def _stage_modules() -> dict[str, Any]:
    from stages import embed, mine

    return {"embed": embed, "mine": mine}


def _report(record: dict) -> None:
    if record.get("status") == "up-to-date":
        typer.echo(f"up to date: {record['folder']} (nothing to do; --force recomputes)")
        return
    counts = ", ".join(f"{k}={v}" for k, v in record["counts"].items())
    typer.echo(f"{record['stage']}: done in {record['timings']['seconds']:.1f}s ({counts})")


@app.command()
@_user_errors
def embed(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    device: DeviceOpt = None,
    batch_size: BatchOpt = None,
    out: OutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Encode every image with the manifest's open_clip model into Parquet shards (<out>/embed/)."""
    from stages import embed as stage

    loaded = _manifest(dataset, manifest, **{"run.device": device, "embed.batch_size": batch_size, "work_dir": out})
    _report(stage.run(loaded, force=force))


@app.command()
@_user_errors
def mine(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    k: KOpt = None,
    device: DeviceOpt = None,
    out: OutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Exact top-k image neighbours (FAISS) expanded to candidate caption pairs (<out>/mine/)."""
    from stages import mine as stage

    loaded = _manifest(dataset, manifest, **{"mine.k": k, "run.device": device, "work_dir": out})
    _report(stage.run(loaded, force=force))


@app.command()
@_user_errors
def run(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    device: DeviceOpt = None,
    out: OutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Run every data stage in order (embed, mine, ...); finished stages with unchanged inputs are skipped."""
    loaded = _manifest(dataset, manifest, **{"run.device": device, "work_dir": out})
    for module in _stage_modules().values():
        _report(module.run(loaded, force=force))


@app.command()
@_user_errors
def status(dataset: DatasetOpt = None, manifest: ManifestOpt = None, out: OutOpt = None) -> None:
    """Each stage's state (done / stale / missing), counts and time, from its stage record."""
    loaded = load_manifest(manifest_path(dataset, manifest), {"work_dir": out})
    for name, module in _stage_modules().items():
        record = read_record(loaded.work_dir / name)
        if record is None:
            typer.echo(f"{name:<8} missing")
            continue
        try:
            current = module.plan(loaded).fingerprint == record["fingerprint"]
        except UserError:
            current = False
        counts = ", ".join(f"{k}={v}" for k, v in record.get("counts", {}).items())
        state = "done" if current else "stale"
        typer.echo(f"{name:<8} {state:<6} {record['timings']['seconds']:>8.1f}s  {counts}")


# annotate: the human round trip around condition writing and rating (stages/annotate.py, docs/annotate.md).
annotate_app = typer.Typer(
    help="Human annotation round trip: export crowd tasks, import results, split into C-STS train/validation/test.",
    no_args_is_help=True,
)
app.add_typer(annotate_app, name="annotate")
AnnotateStageOpt = Annotated[
    str, typer.Option("--stage", help="conditions (writing a high and a low condition per pair) or ratings (1-5).")
]
AnnotateOutOpt = Annotated[
    Path | None, typer.Option("--out", help="Folder of the annotate files (default: <work_dir>/annotate/).")
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the sample, the task order or the split.")]


def _annotate_dir(dataset: str | None, manifest: Path | None, out: Path | None) -> tuple[Path, Path | None]:
    """The annotate folder and the manifest's work_dir (None when only --out is given)."""
    if dataset is None and manifest is None:
        if out is None:
            raise UserError("give --dataset/--manifest (files under <work_dir>/annotate/) or --out DIR")
        return out, None
    work_dir = load_manifest(manifest_path(dataset, manifest)).work_dir
    return (out if out is not None else work_dir / "annotate"), work_dir


def _only_for(stage: str, wanted: str, **given: Any) -> None:
    used = [f"--{name.replace('_', '-')}" for name, value in given.items() if value is not None]
    if stage != wanted and used:
        raise UserError(f"{', '.join(used)}: only for --stage {wanted}")


@annotate_app.command("export")
@_user_errors
def annotate_export(
    stage: AnnotateStageOpt,
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    input_path: Annotated[
        Path | None,
        typer.Option(
            "--input",
            help="conditions: kept pairs to sample, a kept folder or a Parquet/CSV file with the filter's kept "
            "columns (default: <work_dir>/filter/kept/).",
        ),
    ] = None,
    n: Annotated[int | None, typer.Option("--n", help="conditions: pairs to sample (default 1000).")] = None,
    bins: Annotated[
        int | None, typer.Option("--bins", help="conditions: quantile bins per axis of image cosine x iou (default 4).")
    ] = None,
    seed: SeedOpt = 0,
    out: AnnotateOutOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace task files exported with other parameters.")] = False,
) -> None:
    """Write crowd tasks: an MTurk batch CSV (one HIT per row) and a JSONL of ids (<annotate>/<stage>_tasks/)."""
    from stages import annotate

    _only_for(stage, "conditions", input=input_path, n=n, bins=bins)
    folder, work_dir = _annotate_dir(dataset, manifest, out)
    if stage == "conditions":
        source = annotate.kept_source(work_dir, input_path)
        record = annotate.export_conditions(folder, source, n or 1000, seed, bins or 4, force)
    elif stage == "ratings":
        record = annotate.export_ratings(folder, seed, force)
    else:
        raise UserError(f"--stage {stage!r}: expected conditions or ratings")
    typer.echo(annotate.describe(record))


@annotate_app.command("import")
@_user_errors
def annotate_import(
    stage: AnnotateStageOpt,
    results: Annotated[
        list[Path],
        typer.Option(
            "--results",
            help="Results file: MTurk batch results CSV, or CSV/JSONL with plain field names; repeat for several.",
        ),
    ],
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    aggregate: Annotated[
        str | None, typer.Option("--aggregate", help="ratings: mean or median of an item's ratings (default mean).")
    ] = None,
    not_pertinent_share: Annotated[
        float | None,
        typer.Option(
            "--not-pertinent-share",
            help="ratings: drop an item when more than this share of its raters flag it not pertinent (default 0.5).",
        ),
    ] = None,
    min_ratings: Annotated[
        int | None, typer.Option("--min-ratings", help="ratings: drop items with fewer ratings (default 1).")
    ] = None,
    out: AnnotateOutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Validate crowd results against the exported tasks; write the accepted answers and a per-row report."""
    from stages import annotate

    _only_for(stage, "ratings", aggregate=aggregate, not_pertinent_share=not_pertinent_share, min_ratings=min_ratings)
    folder, _ = _annotate_dir(dataset, manifest, out)
    if stage == "conditions":
        record = annotate.import_conditions(folder, results, force)
    elif stage == "ratings":
        share = 0.5 if not_pertinent_share is None else not_pertinent_share
        record = annotate.import_ratings(folder, results, aggregate or "mean", share, min_ratings or 1, force)
    else:
        raise UserError(f"--stage {stage!r}: expected conditions or ratings")
    typer.echo(annotate.describe(record))


@annotate_app.command("split")
@_user_errors
def annotate_split(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    ratios: Annotated[str, typer.Option("--ratios", help="train:validation:test proportions.")] = "60:15:25",
    seed: SeedOpt = 0,
    out: AnnotateOutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Train/validation/test C-STS files (Parquet and CSV) from the kept rated items (<annotate>/csts/)."""
    from stages import annotate

    folder, _ = _annotate_dir(dataset, manifest, out)
    typer.echo(annotate.describe(annotate.split(folder, seed, annotate.parse_ratios(ratios), force)))


def main() -> None:
    app()
