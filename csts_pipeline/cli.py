"""The `csts-pipeline` command line (typer). Each command loads a manifest, applies CLI overrides and calls
one stage's `run`; user mistakes become a one-line error and exit status 2."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from csts_pipeline.annotate_cli import annotate_app
from csts_pipeline.options import DatasetOpt, ForceOpt, ManifestOpt, user_errors
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

DeviceOpt = Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:N (overrides run.device).")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Work folder for all stage outputs (overrides work_dir).")]
BatchOpt = Annotated[int | None, typer.Option(help="Images per batch for embed (overrides embed.batch_size).")]
KOpt = Annotated[int | None, typer.Option("--k", help="Neighbours per image (overrides mine.k).")]
DecodeOpt = Annotated[
    str | None,
    typer.Option(help="JPEG decode: workers (PIL in DataLoader workers), device (nvJPEG on CUDA) or auto."),
]
WorkersOpt = Annotated[int | None, typer.Option(help="DataLoader worker processes (overrides embed.num_workers).")]
KnnOpt = Annotated[str | None, typer.Option(help="Exact search backend: faiss or torch (overrides mine.knn).")]


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
@user_errors
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
@user_errors
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
@user_errors
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
@user_errors
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
@user_errors
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


app.add_typer(annotate_app, name="annotate")


def main() -> None:
    app()
