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
DecodeOpt = Annotated[
    str | None,
    typer.Option(help="JPEG decode: workers (PIL in DataLoader workers), device (nvJPEG on CUDA) or auto."),
]
WorkersOpt = Annotated[int | None, typer.Option(help="DataLoader worker processes (overrides embed.num_workers).")]
KnnOpt = Annotated[str | None, typer.Option(help="Exact search backend: faiss or torch (overrides mine.knn).")]


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
    from stages.embed import stage as embed
    from stages.filter import stage as filter
    from stages.mine import stage as mine

    return {"embed": embed, "mine": mine, "filter": filter}


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
    decode: DecodeOpt = None,
    num_workers: WorkersOpt = None,
    out: OutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Encode every image with the manifest's open_clip model into Parquet shards (<out>/embed/)."""
    from stages.embed import stage

    overrides = {
        "run.device": device,
        "embed.batch_size": batch_size,
        "embed.decode": decode,
        "embed.num_workers": num_workers,
        "work_dir": out,
    }
    loaded = _manifest(dataset, manifest, **overrides)
    _report(stage.run(loaded, force=force))


@app.command()
@_user_errors
def mine(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    k: KOpt = None,
    knn: KnnOpt = None,
    device: DeviceOpt = None,
    out: OutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Exact top-k image neighbours (FAISS) expanded to candidate caption pairs (<out>/mine/)."""
    from stages.mine import stage

    loaded = _manifest(dataset, manifest, **{"mine.k": k, "mine.knn": knn, "run.device": device, "work_dir": out})
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
    Path | None,
    typer.Option("--out", help="Work folder (overrides work_dir); with --pairs, the scored file (.csv or .parquet)."),
]
KeepRejectedOpt = Annotated[
    bool, typer.Option("--keep-rejected", help="Also write the rejected pairs with the first criterion they failed.")
]
FullReportOpt = Annotated[
    bool,
    typer.Option("--full-report", help="Compute the cosine for every candidate (exact funnel), not only survivors."),
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
@_user_errors
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
) -> None:
    """Keep the candidate pairs meeting the C-STS criteria (<out>/filter/), print the funnel; or score --pairs."""
    from stages.filter import stage

    overrides, off = _threshold_overrides(
        max_iou=max_iou, min_cosine=min_cosine, max_cosine=max_cosine, min_ratio=min_ratio, min_length=min_length
    )
    overrides |= {
        "filter.text_encoder": text_encoder,
        "filter.text_pooling": text_pooling,
        "filter.keep_rejected": keep_rejected or None,
        "filter.full_report": full_report or None,
        "run.device": device,
    }
    if pairs is None:
        overrides["work_dir"] = out
    elif out is None:
        raise UserError("--pairs needs --out FILE (.csv or .parquet) for the scored pairs")
    loaded = _manifest(dataset, manifest, **overrides)
    for key in off:
        setattr(loaded.filter, key, None)
    if pairs is None:
        _report(stage.run(loaded, force=force))
        return
    result = stage.score_file(loaded, pairs, out)
    typer.echo(f"scored {result['pairs']} pairs in {result['seconds']:.1f}s: {result['kept']} kept -> {result['out']}")


# --- train / evaluate (C-STS models) -----------------------------------------------------------------------
ModelDeviceOpt = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
PrecisionOpt = Annotated[
    str | None, typer.Option(help="auto (bf16/fp16 autocast on CUDA, fp32 on CPU), fp32, fp16 or bf16.")
]
MetricsOutOpt = Annotated[
    Path | None, typer.Option("--metrics-out", help="Write the metrics JSON (spearman, pearson, n) here too.")
]


def _print_metrics(metrics: dict[str, dict]) -> None:
    from stages.train.scoring import format_table

    typer.echo(format_table(metrics))


@app.command()
@_user_errors
def train(
    train_data: Annotated[
        Path, typer.Option("--train", help="C-STS training data: CSV, Parquet file or folder of Parquet shards.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Output folder: best/, metrics.json, predictions, record.")],
    validation: Annotated[
        Path | None, typer.Option(help="Validation data (default: the --train source's split == validation rows).")
    ] = None,
    test: Annotated[
        Path | None, typer.Option(help="Test data (default: the --train source's split == test rows).")
    ] = None,
    preset: Annotated[
        str | None, typer.Option(help="paper: the C-STS authors' released hyperparameters (docs/train.md).")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="HF model name or folder; packaged:all-MiniLM-L6-v2 (the default) ships.")
    ] = None,
    encoding: Annotated[str | None, typer.Option(help="cross, bi (default) or tri.")] = None,
    objective: Annotated[str | None, typer.Option(help="mse (default), quad or quad+mse (bi and tri only).")] = None,
    pooler: Annotated[
        str | None, typer.Option(help="cls-mlp, cls or mean (default: the model's own pooling, else cls).")
    ] = None,
    transform: Annotated[
        bool | None, typer.Option("--transform/--no-transform", help="Linear layer + activation after pooling.")
    ] = None,
    tri_head: Annotated[str | None, typer.Option(help="Tri-encoder h(c, s): hadamard (default) or concat.")] = None,
    margin: Annotated[float | None, typer.Option(help="Quad loss margin (default 1.0).")] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Peak learning rate (AdamW).")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Rows per batch (Quad: even, whole pairs).")] = None,
    grad_accum: Annotated[int | None, typer.Option(help="Batches per optimizer step.")] = None,
    epochs: Annotated[int | None, typer.Option(help="Training epochs.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after this many optimizer steps.")] = None,
    weight_decay: Annotated[float | None, typer.Option(help="AdamW weight decay (not on biases and norms).")] = None,
    warmup_ratio: Annotated[float | None, typer.Option(help="Linear warmup over this share of the steps.")] = None,
    max_grad_norm: Annotated[float | None, typer.Option(help="Gradient clipping norm; 0 turns clipping off.")] = None,
    max_length: Annotated[int | None, typer.Option(help="Tokens per encoded sequence.")] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed (initialisation and batch order).")] = None,
    precision: PrecisionOpt = None,
    min_label: Annotated[float | None, typer.Option(help="Label scaled to 0 (default: the observed minimum).")] = None,
    max_label: Annotated[float | None, typer.Option(help="Label scaled to 1 (default: the observed maximum).")] = None,
    condition_only: Annotated[bool, typer.Option(help="Ablation: the cross-encoder sees only the condition.")] = False,
    sentences_only: Annotated[bool, typer.Option(help="Ablation: the cross-encoder sees only the sentences.")] = False,
    eval_batch_size: Annotated[int, typer.Option(help="Rows per batch when scoring.")] = 64,
    device: ModelDeviceOpt = "auto",
    metrics_out: MetricsOutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Fine-tune a C-STS cross/bi/tri-encoder; keep the best epoch by validation Spearman (<out>/best/)."""
    from stages.train import train as stage

    options = stage.TrainOptions(
        train=train_data,
        out=out,
        validation=validation,
        test=test,
        preset=preset,
        model=model,
        encoding=encoding,
        objective=objective,
        pooler=pooler,
        transform=transform,
        tri_head=tri_head,
        margin=margin,
        learning_rate=lr,
        batch_size=batch_size,
        grad_accum=grad_accum,
        epochs=epochs,
        max_steps=max_steps,
        weight_decay=weight_decay,
        warmup_ratio=warmup_ratio,
        max_grad_norm=max_grad_norm,
        max_length=max_length,
        seed=seed,
        precision=precision,
        min_label=min_label,
        max_label=max_label,
        condition_only=condition_only,
        sentences_only=sentences_only,
        device=device,
        eval_batch_size=eval_batch_size,
        metrics_out=metrics_out,
    )
    record = stage.run(options, force=force)
    if record.get("status") == "up-to-date":
        typer.echo(f"up to date: {record['folder']} (nothing to do; --force retrains)")
        record = read_record(out)
    else:
        typer.echo(f"train: done in {record['timings']['seconds']:.1f}s, best epoch {record['best_epoch']}")
    _print_metrics(record["split_metrics"])


@app.command()
@_user_errors
def evaluate(
    model: Annotated[str, typer.Option(help="A train output's best/ folder, or any HF model (zero-shot bi-encoder).")],
    data: Annotated[Path, typer.Option(help="C-STS CSV/Parquet (file or shard folder), or an STS Benchmark file.")],
    task: Annotated[str, typer.Option(help="csts (C-STS columns) or stsb (STS Benchmark tab-separated).")] = "csts",
    split: Annotated[str | None, typer.Option(help="Rows of this split only (sources with a split column).")] = None,
    encoding: Annotated[str | None, typer.Option(help="Base models: bi (zero-shot); trained models: as saved.")] = None,
    pooler: Annotated[
        str | None, typer.Option(help="Base models: cls-mlp, cls or mean (default: the model's own, else cls).")
    ] = None,
    max_length: Annotated[int, typer.Option(help="Base models: tokens per encoded sequence.")] = 128,
    batch_size: Annotated[int, typer.Option(help="Rows per batch.")] = 64,
    precision: PrecisionOpt = None,
    device: ModelDeviceOpt = "auto",
    metrics_out: Annotated[
        Path, typer.Option("--metrics-out", help="Metrics JSON path; predictions_<split>.parquet go next to it.")
    ] = Path("runs/evaluate/metrics.json"),
) -> None:
    """Spearman and Pearson (x100) of a model's similarity scores against the labels."""
    from stages.train import evaluate as stage

    options = stage.EvaluateOptions(
        model=model,
        data=data,
        task=task,
        split=split,
        encoding=encoding,
        pooler=pooler,
        max_length=max_length,
        batch_size=batch_size,
        device=device,
        precision=precision or "auto",
        metrics_out=metrics_out,
    )
    _print_metrics(stage.run(options))
    typer.echo(f"metrics: {metrics_out}")


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
