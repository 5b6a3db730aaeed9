"""train: fine-tune a C-STS model (cross, bi or tri-encoder; MSE, Quad or Quad+MSE) on C-STS-format data.

Reader: stages.train.data (C-STS CSV or Parquet shards, one source per split or a `split` column). Model:
stages.train.models. Loop: AdamW (no decay on biases and norms), linear schedule with warmup, gradient
accumulation, autocast on CUDA, evaluation on the validation split after each epoch, the best epoch kept in
`<out>/best/` (the loop: stages.train.loop). Writer: `best/`, `metrics.json`, `predictions_<split>.parquet`,
`train_record.json` (docs/schemas.md), committed whole through pipeline.commit.OutputFolder (lock, staging folder,
record, swap). A checkpoint after each epoch (stages.train.checkpoint: safetensors + JSON, no pickle) in the
staging folder makes an interrupted run resume where it stopped; a rerun with the same data and parameters is a
no-op. The hyperparameters, their defaults and bounds: pipeline.manifest.TrainConfig.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.device import resolve_device
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import TrainConfig
from csts_pipeline.pipeline.packaged_models import resolve_model_path
from csts_pipeline.pipeline.records import file_fingerprint, fingerprint, read_record
from csts_pipeline.pipeline.shards import SHARD_GLOB
from csts_pipeline.stages.train.loop import CHECKPOINT, TrainJob, build_job, set_seed, start_or_resume, train_epochs
from csts_pipeline.stages.train.models import EncoderSpec, load_model, model_pooling
from csts_pipeline.stages.train.scoring import half_precision, score_split, write_metrics, write_outputs
from csts_pipeline.stages.train.splits import Splits, check_task, read_splits, split_label_scale

STAGE = "train"
NOT_FINGERPRINTED = {"eval_batch_size"}  # scoring batch size: no effect on the trained model


@dataclass
class TrainOptions:
    """Where `train` reads and writes and on what it runs; the hyperparameters are `config` (defaults, bounds and
    descriptions in pipeline.manifest.TrainConfig; stages.train.presets.train_config(preset, overrides) builds one)."""

    train: Path
    out: Path
    validation: Path | None = None
    test: Path | None = None
    config: TrainConfig = field(default_factory=TrainConfig)
    device: str = "auto"
    metrics_out: Path | None = None
    task: str = "csts"  # csts, or stsb: STS Benchmark files (no condition, labels 0-5; the paper's Table 9)


def resolve(options: TrainOptions) -> TrainConfig:
    """The hyperparameters to train with: `pooler: auto` becomes the model's own pooling (else cls)."""
    config = options.config
    if config.pooler == "auto":
        config = config.model_copy(update={"pooler": model_pooling(resolve_model_path(config.model)) or "cls"})
    return config


def encoder_spec(config: TrainConfig) -> EncoderSpec:
    spec = EncoderSpec(
        encoding=config.encoding,
        pooler=config.pooler,
        transform=config.transform,
        tri_head=config.tri_head,
        condition_only=config.condition_only,
        sentences_only=config.sentences_only,
        max_length=config.max_length,
        base_model=config.model,
        objective=config.objective,
    )
    spec.check()
    return spec


def _source_fingerprint(path: Path) -> str:
    if path.is_dir():
        return fingerprint([(p.name, file_fingerprint(p)) for p in sorted(path.glob(SHARD_GLOB))])
    return file_fingerprint(path)


def _model_fingerprint(name: str) -> str:
    """A local model folder by its files' names, sizes and times; a hub name by itself."""
    folder = Path(resolve_model_path(name))
    if not folder.is_dir():
        return name
    listing = [(str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))]
    return fingerprint(listing)


def plan(options: TrainOptions, config: TrainConfig, splits: Splits) -> OutputFolder:
    params = {
        **config.model_dump(exclude=NOT_FINGERPRINTED),
        "splits": {name: str(path) for name, path in splits.sources.items()},
        "task": options.task,
    }
    inputs = {name: _source_fingerprint(path) for name, path in splits.sources.items()}
    inputs["model"] = _model_fingerprint(config.model)
    return OutputFolder(STAGE, options.out, params, inputs)


def _check_out_folder(out: Path) -> None:
    """A run starts its folder afresh, so never point it at a folder that is not a train output."""
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    record = read_record(out)
    if record is not None and record.get("stage") != STAGE:
        raise UserError(f"--out {out}: holds the output of stage {record.get('stage')!r}; choose another folder")
    if record is None and any(out.iterdir()):
        raise UserError(f"--out {out}: exists and is not a train output folder; choose a new or empty folder")


# --- outputs ------------------------------------------------------------------------------------------------------


def score_best(folder: Path, splits: Splits, device: torch.device, config: TrainConfig, dtype) -> dict:
    """Reload `best/` and score validation and test (or, with neither, the training rows).
    Returns {split: (data, scores, metrics)}."""
    best = load_model(str(folder / "best")).to(device)
    evaluated = {"validation": splits.validation, "test": splits.test}
    evaluated = {name: data for name, data in evaluated.items() if data is not None} or {"train": splits.train}
    results = {}
    for name, data in evaluated.items():
        scores, metrics = score_split(best, data, device, config.eval_batch_size, dtype)
        results[name] = (data, scores, metrics)
    return results


def finish(
    out: OutputFolder, options: TrainOptions, splits: Splits, job: TrainJob, *, progress: dict, resumed: bool
) -> dict:
    """Score the best epoch; write metrics.json, the predictions and the stage record; drop the checkpoint."""
    device, dtype = job.device, job.dtype
    del job.model, job.optimizer, job.scheduler  # free the training copy before loading best/
    results = score_best(out.staging, splits, device, job.config, dtype)
    document = write_outputs(results, out.staging / "metrics.json")
    (out.staging / CHECKPOINT).unlink(missing_ok=True)
    counts = {
        "train_rows": len(splits.train),
        "train_pairs": None if job.pairs is None else len(job.pairs),
        **({} if job.pairing is None else job.pairing.counts()),
        **{f"{name}_rows": len(data) for name, (data, _, _) in results.items() if name != "train"},
        "epochs": progress["epoch"],
        "optimizer_steps": progress["step"],
    }
    record = out.finish(
        counts,
        record_copy="train_record.json",
        metrics=document,
        split_metrics={name: metrics for name, (_, _, metrics) in results.items()},
        history=progress["history"],
        initial_probe_loss=progress.get("initial_probe_loss"),
        best_epoch=progress["best_epoch"],
        select=job.config.select,
        selected_epoch=progress["best_epoch"] if job.config.select == "best" else progress["epoch"],
        label_range=list(job.label_range),
        device=str(device),
        precision=str(dtype).removeprefix("torch.") if dtype is not None else "fp32",
        resumed=resumed,
        train_seconds=round(progress["seconds"], 3),
        examples_per_second=round(progress["rows"] / max(progress["seconds"], 1e-9), 2),
    )
    if options.metrics_out is not None:
        write_metrics(options.metrics_out, document)
    return record


def run(options: TrainOptions, force: bool = False) -> dict:
    """Train into `options.out`; returns the stage record (or an up-to-date marker)."""
    config = resolve(options)
    spec = encoder_spec(config)
    check_task(options.task, config)
    splits = read_splits(options.train, options.validation, options.test, options.task)
    scale = split_label_scale(splits, config.min_label, config.max_label, options.task)
    spec.label_low, spec.label_high = scale.low, scale.high
    with plan(options, config, splits) as out:
        if out.up_to_date() and not force:
            if options.metrics_out is not None:
                write_metrics(options.metrics_out, out.record()["metrics"])
            return out.unchanged()
        _check_out_folder(options.out)
        device = resolve_device(options.device)
        dtype = half_precision(device, config.precision)
        set_seed(config.seed)
        job = build_job(
            config, load_model(config.model, spec).to(device), splits=splits, scale=scale, device=device, dtype=dtype
        )
        resumed = out.begin(force=force)
        progress = start_or_resume(job, out.staging / CHECKPOINT, resumed)
        train_epochs(job, progress, out.staging)
        return finish(out, options, splits, job, progress=progress, resumed=resumed)
