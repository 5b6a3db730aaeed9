"""The `csts-pipeline` command line (typer). Each command loads a manifest, applies CLI overrides and calls
one stage's `run`; user mistakes become a one-line error and exit status 2."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from csts_pipeline.annotate_cli import annotate_app
from csts_pipeline.options import DatasetOpt, DeviceOpt, ForceOpt, ManifestOpt, user_errors
from csts_pipeline.publish_cli import register as register_publish_command
from csts_pipeline.train_cli import register as register_train_commands
from pipeline.errors import UserError
from pipeline.manifest import Manifest, open_manifest
from pipeline.records import read_record
from pipeline.storage import is_url, location, remote_of, remote_record

app = typer.Typer(
    help="Build C-STS datasets from image-caption corpora: embed -> mine -> filter -> train.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
log = logging.getLogger("csts-pipeline")

OutOpt = Annotated[
    str | None,
    typer.Option("--out", help="Work folder or URL (s3://, gs://, ...) for all stage outputs (overrides work_dir)."),
]
BatchOpt = Annotated[int | None, typer.Option(help="Images per batch for embed (overrides embed.batch_size).")]
KOpt = Annotated[int | None, typer.Option("--k", help="Neighbours per image (overrides mine.k).")]
DecodeOpt = Annotated[
    str | None,
    typer.Option(help="JPEG decode: workers (PIL in DataLoader workers), device (nvJPEG on CUDA) or auto."),
]
WorkersOpt = Annotated[int | None, typer.Option(help="DataLoader worker processes (overrides embed.num_workers).")]
KnnOpt = Annotated[str | None, typer.Option(help="Exact search backend: faiss or torch (overrides mine.knn).")]
ExecutorOpt = Annotated[
    str | None,
    typer.Option(
        help="local (units in this process) or ray (units in Ray actors; docs/ray.md); overrides run.executor."
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        help="With --executor ray: auto joins this machine's Ray cluster, or an address; default: a new local Ray."
    ),
]
ByOpt = Annotated[
    str | None, typer.Option(help="Neighbours by image (CLIP) or text (caption sentence embeddings); mine.by.")
]
IndexOpt = Annotated[
    str | None,
    typer.Option(help="Neighbour index: auto, exact, ivf or hnsw (overrides mine.index; docs/mine.md)."),
]


def _manifest(dataset: str | None, manifest: str | None, **overrides: Any) -> Manifest:
    """The manifest with the command's overrides, its URL inputs copied into the cache (pipeline.storage)."""
    overrides["work_dir"] = location(overrides.get("work_dir"))
    loaded = open_manifest(dataset, manifest, overrides)
    loaded.fetch_inputs()
    if loaded.demo_encoders:
        typer.secho(
            f"note: {loaded.name} uses demo encoders (random-init CLIP, all-MiniLM-L6-v2): it shows the "
            "mechanics, not the neighbours or similarities of real models.",
            fg=typer.colors.YELLOW,
        )
    return loaded


def _executor(manifest: Manifest) -> Any:
    """The executor the manifest's `run.executor` names; Ray is imported only when asked for."""
    if manifest.run.executor == "ray":
        from pipeline.ray_executor import RayExecutor

        return RayExecutor(address=manifest.run.ray_address)
    from pipeline.executor import LocalExecutor

    return LocalExecutor()


def _data_stages() -> dict[str, Any]:
    from stages.embed.stage import EmbedStage
    from stages.filter.stage import FilterStage
    from stages.mine.stage import MineStage

    return {"embed": EmbedStage, "mine": MineStage, "filter": FilterStage}


def _run_stage(loaded: Manifest, name: str, force: bool) -> None:
    """One data stage through the manifest's executor (run.executor), then its summary."""
    executor = _executor(loaded)
    _report(executor.run(_data_stages()[name](loaded), force=force), loaded)


def _report(record: dict, manifest: Manifest | None = None) -> None:
    """One summary per stage run: what it did (or that it was up to date), its skips, and filter's funnel."""
    if record.get("status") == "up-to-date":
        typer.echo(f"up to date: {record['folder']} (nothing to do; --force recomputes)")
        folder = record["folder"]
        record = (remote_record(*folder.rsplit("/", 1)) if is_url(folder) else read_record(Path(folder))) or {}
    else:
        counts = ", ".join(f"{k}={v}" for k, v in record["counts"].items())
        reused = f", {record['units_reused']} of {record['units']} units resumed" if record.get("units_reused") else ""
        typer.echo(f"{record['stage']}: done in {record['timings']['seconds']:.1f}s ({counts}{reused})")
    if "reader_skip_counts" in record and record.get("status") == "done":
        from pipeline.datasets import describe_skips

        typer.echo(f"{record['stage']}: {describe_skips(record['reader_skip_counts'])}")
    if "funnel" in record and manifest is not None:
        from stages.filter.stage import funnel_table

        typer.echo(funnel_table(manifest, record))


@app.command()
@user_errors
def embed(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    device: DeviceOpt = None,
    batch_size: BatchOpt = None,
    decode: DecodeOpt = None,
    num_workers: WorkersOpt = None,
    out: OutOpt = None,
    force: ForceOpt = False,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Encode every image with the manifest's open_clip model into Parquet shards (<out>/embed/)."""
    overrides = {
        "run.device": device,
        "embed.batch_size": batch_size,
        "embed.decode": decode,
        "embed.num_workers": num_workers,
        "work_dir": out,
        "run.executor": executor,
        "run.ray_address": ray_address,
    }
    _run_stage(_manifest(dataset, manifest, **overrides), "embed", force)


@app.command()
@user_errors
def mine(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    k: KOpt = None,
    knn: KnnOpt = None,
    index: IndexOpt = None,
    by: ByOpt = None,
    device: DeviceOpt = None,
    out: OutOpt = None,
    force: ForceOpt = False,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Top-k image neighbours (exact, or approximate with measured recall) expanded to caption pairs (<out>/mine/)."""
    overrides = {
        "mine.k": k,
        "mine.knn": knn,
        "mine.index": index,
        "mine.by": by,
        "run.device": device,
        "work_dir": out,
    }
    overrides |= {"run.executor": executor, "run.ray_address": ray_address}
    _run_stage(_manifest(dataset, manifest, **overrides), "mine", force)


@app.command()
@user_errors
def run(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    device: DeviceOpt = None,
    out: OutOpt = None,
    force: ForceOpt = False,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Run every data stage in order (embed, mine, ...); finished stages with unchanged inputs are skipped."""
    overrides = {"run.device": device, "work_dir": out, "run.executor": executor, "run.ray_address": ray_address}
    loaded = _manifest(dataset, manifest, **overrides)
    runner = _executor(loaded)
    for stage in _data_stages().values():
        _report(runner.run(stage(loaded), force=force), loaded)


@app.command()
@user_errors
def status(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    out: OutOpt = None,
    verify: Annotated[
        bool, typer.Option("--verify", metavar="", help="Read every listed file and check its content checksum.")
    ] = False,
) -> None:
    """Each data stage's state (done, stale, incomplete, partial or missing), counts and time, from its record;
    with --verify, `corrupt` for a stage whose files differ from their checksums (exit code 1)."""
    from pipeline.checksums import verify_outputs
    from pipeline.executor import state

    loaded = open_manifest(dataset, manifest, {"work_dir": location(out)})
    loaded.fetch_inputs()
    corrupt = False
    for name, stage in _data_stages().items():
        try:
            found, record, detail = state(stage(loaded))
        except UserError as exc:  # a corrupt record
            typer.echo(f"{name:<8} corrupt   {exc}")
            continue
        if record is None:
            typer.echo(f"{name:<8} {found:<10}{detail}".rstrip())
            continue
        if verify and found != "incomplete" and remote_of(loaded.work_dir) is None:
            problems, unhashed = verify_outputs(loaded.work_dir / name, record)
            found, detail = ("corrupt", "; ".join(problems)) if problems else (found, detail)
            corrupt = corrupt or bool(problems)
            if unhashed and not problems:
                detail = f"not verifiable: {unhashed} files have no checksum (an older record); --force rebuilds"
        counts = ", ".join(f"{k}={v}" for k, v in record.get("counts", {}).items())
        line = f"{name:<8} {found:<10}{record.get('timings', {}).get('seconds', 0):>8.1f}s  {counts}"
        shown = found in ("incomplete", "stale", "corrupt") or detail.startswith("not verifiable")
        typer.echo(line + (f"\n         {detail}" if shown and detail else ""))
    if corrupt:
        raise typer.Exit(1)


# --- filter (issue 3) ---------------------------------------------------------------------------------------------
_OFF = ("none", "null", "off")
ThresholdHelp = "{}; a number, or none to switch the criterion off (overrides filter.{})."
MaxIouOpt = Annotated[str | None, typer.Option(help=ThresholdHelp.format("Maximum bag-of-words IoU", "max_iou"))]
MinCosineOpt = Annotated[
    str | None, typer.Option(help=ThresholdHelp.format("Minimum SimCSE cosine similarity", "min_cosine"))
]
MaxCosineOpt = Annotated[
    str | None, typer.Option(help=ThresholdHelp.format("Maximum SimCSE cosine similarity", "max_cosine"))
]
MinRatioOpt = Annotated[
    str | None, typer.Option(help=ThresholdHelp.format("Minimum word-count ratio (shorter/longer)", "min_ratio"))
]
MinLengthOpt = Annotated[
    str | None, typer.Option(help=ThresholdHelp.format("Minimum characters of the shorter sentence", "min_length"))
]
TextEncoderOpt = Annotated[
    str | None,
    typer.Option(help="sentence-transformers model name or local folder, or packaged:all-MiniLM-L6-v2."),
]
TextPoolingOpt = Annotated[
    str | None,
    typer.Option(
        help="cls_pooler (SimCSE's tool), cls, mean, or model (its own pooling); overrides filter.text_pooling."
    ),
]
PairsOpt = Annotated[
    Path | None,
    typer.Option("--pairs", help="Score this CSV/Parquet of sentence pairs (columns sentence1, sentence2) instead."),
]
FilterOutOpt = Annotated[
    str | None,
    typer.Option("--out", help="Work folder (overrides work_dir); with --pairs, the scored file (.csv or .parquet)."),
]
KeepRejectedOpt = Annotated[
    bool,
    typer.Option(
        "--keep-rejected", metavar="", help="Also write the rejected pairs with the first criterion they failed."
    ),
]
FullReportOpt = Annotated[
    bool,
    typer.Option(
        "--full-report", metavar="", help="Compute the cosine for every candidate (exact funnel), not only survivors."
    ),
]


def _threshold_overrides(**given: str | None) -> tuple[dict[str, float | int], list[str]]:
    """Numbers become manifest overrides; 'none' names a criterion to switch off."""
    overrides: dict[str, float | int] = {}
    off: list[str] = []
    for key, value in given.items():
        if value is None:
            continue
        if value.strip().lower() in _OFF:
            off.append(key)
            continue
        try:
            overrides[f"filter.{key}"] = int(value) if key == "min_length" else float(value)
        except ValueError:
            raise UserError(f"--{key.replace('_', '-')} {value!r}: give a number, or none to switch it off") from None
    return overrides, off


@app.command("filter")
@user_errors
def filter_command(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    max_iou: MaxIouOpt = None,
    min_cosine: MinCosineOpt = None,
    max_cosine: MaxCosineOpt = None,
    min_ratio: MinRatioOpt = None,
    min_length: MinLengthOpt = None,
    text_encoder: TextEncoderOpt = None,
    text_pooling: TextPoolingOpt = None,
    pairs: PairsOpt = None,
    out: FilterOutOpt = None,
    keep_rejected: KeepRejectedOpt = False,
    full_report: FullReportOpt = False,
    device: DeviceOpt = None,
    force: ForceOpt = False,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Keep the candidate pairs meeting the C-STS criteria (<out>/filter/), print the funnel; or score --pairs."""
    overrides, off = _threshold_overrides(
        max_iou=max_iou, min_cosine=min_cosine, max_cosine=max_cosine, min_ratio=min_ratio, min_length=min_length
    )
    overrides |= {
        "filter.text_encoder": text_encoder,
        "filter.text_pooling": text_pooling,
        "filter.keep_rejected": keep_rejected or None,
        "filter.full_report": full_report or None,
        "run.device": device,
        "run.executor": executor,
        "run.ray_address": ray_address,
    }
    if pairs is None:
        overrides["work_dir"] = out
    elif out is None:
        raise UserError("--pairs needs --out FILE (.csv or .parquet) for the scored pairs")
    loaded = _manifest(dataset, manifest, **overrides)
    for key in off:
        setattr(loaded.filter, key, None)
    if pairs is None:
        _run_stage(loaded, "filter", force)
        return
    from stages.filter.pairs_file import score_file

    result = score_file(loaded, pairs, Path(out))
    typer.echo(result["funnel"].table())
    typer.echo(f"scored {result['pairs']} pairs in {result['seconds']:.1f}s: {result['kept']} kept -> {result['out']}")


# train / evaluate (C-STS models): csts_pipeline/train_cli.py
register_train_commands(app)


app.add_typer(annotate_app, name="annotate")
# export: publish the C-STS splits as a Hugging Face dataset folder (csts_pipeline/publish_cli.py)
register_publish_command(app)


def main() -> None:
    app()
