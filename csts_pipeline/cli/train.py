"""The `train` and `evaluate` commands (C-STS models), registered onto the main app by `register(app)`.

`train`'s hyperparameter options are made from pipeline.manifest.TrainConfig, one per field (its flag, type and
description), so a hyperparameter is written once: a new field is a new option."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import typer
from pydantic.fields import FieldInfo

from csts_pipeline.cli.options import (
    ApiKeyEnvOpt,
    EndpointOpt,
    ForceOpt,
    ModelDeviceOpt,
    PrecisionOpt,
    TimeoutOpt,
    say_up_to_date,
    user_errors,
    with_options,
)
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import TrainConfig, open_manifest
from csts_pipeline.pipeline.model_spec import ModelSpec
from csts_pipeline.pipeline.records import read_record
from csts_pipeline.pipeline.storage import output_cache
from csts_pipeline.pipeline.urls import is_url
from csts_pipeline.stages.train.presets import train_config

MetricsOutOpt = Annotated[
    Path | None, typer.Option("--metrics-out", help="Write the metrics JSON (spearman, pearson, n) here too.")
]


def _print_metrics(metrics: dict[str, dict]) -> None:
    from csts_pipeline.stages.train.scoring import format_table

    typer.echo(format_table(metrics))


def _scalar_type(annotation: Any) -> type:
    """int for `int | None`, and so on."""
    if get_origin(annotation) in (Union, types.UnionType):
        (annotation,) = [arg for arg in get_args(annotation) if arg is not type(None)]
    return annotation


def _config_option(name: str, field: FieldInfo) -> inspect.Parameter:
    """A TrainConfig field as a command-line option; None (not given) leaves the preset's or default value."""
    kind = _scalar_type(field.annotation)
    flag = TrainConfig.cli_flag(name)
    declaration = f"{flag}/--no-{flag.removeprefix('--')}" if kind is bool else flag
    option = typer.Option(declaration, help=field.description, metavar="" if kind is bool else None)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind | None, option]
    )


def with_config_options(after: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command taking `**hyperparameters` one option per TrainConfig field, placed after option `after`."""
    return with_options(after, [_config_option(name, field) for name, field in TrainConfig.model_fields.items()])


def _manifest_train_section(dataset: str | None, manifest: str | None) -> dict[str, Any] | None:
    """The keys a manifest's `train:` section sets (they beat --preset; options beat them), or None."""
    if dataset is None and manifest is None:
        return None
    return open_manifest(dataset, manifest).train.model_dump(exclude_unset=True)


TrainDataOpt = Annotated[
    Path, typer.Option("--train", help="C-STS training data: CSV, Parquet file or folder of Parquet shards.")
]
TrainOutOpt = Annotated[
    str,
    typer.Option("--out", help="Output folder: best/, metrics.json, predictions, record (a path or a URL)."),
]
ValidationOpt = Annotated[
    Path | None, typer.Option(help="Validation data (default: the --train source's split == validation rows).")
]
TestOpt = Annotated[Path | None, typer.Option(help="Test data (default: the --train source's split == test rows).")]
TrainTaskOpt = Annotated[
    str, typer.Option(help="csts (C-STS data) or stsb (STS Benchmark files: cross or bi, mse; Table 9).")
]
PresetOpt = Annotated[
    str | None,
    typer.Option(
        help="paper: the C-STS authors' released hyperparameters; paper:MODEL:ENCODING (e.g. "
        "paper:simcse-large:bi): their Table 8 setting for that model and encoding (docs/train.md)."
    ),
]
TrainDatasetOpt = Annotated[
    str | None, typer.Option("--dataset", "-d", help="Take hyperparameters from manifests/NAME.yaml's train:.")
]
TrainManifestOpt = Annotated[
    str | None,
    typer.Option("--manifest", "-m", help="Take hyperparameters from this manifest's train: (a path or a URL)."),
]
SeedsOpt = Annotated[
    str | None,
    typer.Option(
        help="Train once per seed, e.g. 42,43,44, into <out>/seed-N/; metrics.json: each seed and mean +- std."
    ),
]
EvaluateModelOpt = Annotated[
    str, typer.Option(help="A train output's best/ folder, or any HF model (zero-shot bi-encoder).")
]
DataOpt = Annotated[Path, typer.Option(help="C-STS CSV/Parquet (file or shard folder), or an STS Benchmark file.")]
EvaluateTaskOpt = Annotated[str, typer.Option(help="csts (C-STS columns) or stsb (STS Benchmark tab-separated).")]
SplitOpt = Annotated[str | None, typer.Option(help="Rows of this split only (sources with a split column).")]
EncodingOpt = Annotated[
    str | None,
    typer.Option(help="Base models: bi (zero-shot) or prompt (a generative model rates 1-5); trained: as saved."),
]
PoolerOpt = Annotated[
    str | None, typer.Option(help="Base models: cls-mlp, cls or mean (default: the model's own, else cls).")
]
MaxLengthOpt = Annotated[int, typer.Option(help="Base models: tokens per encoded sequence.")]
BatchSizeOpt = Annotated[int, typer.Option(help="Rows per batch.")]
EvaluateMetricsOutOpt = Annotated[
    Path, typer.Option("--metrics-out", help="Metrics JSON path; predictions_<split>.parquet go next to it.")
]
InstructionsOpt = Annotated[str, typer.Option(help="--encoding prompt: none, short (default) or long.")]
InstructionsFileOpt = Annotated[Path | None, typer.Option(help="--instructions long: the instructions' text file.")]
ShotsOpt = Annotated[int, typer.Option(help="--encoding prompt: 0, 2 or 4 in-context examples.")]
ExamplesOpt = Annotated[Path | None, typer.Option(help="--shots 2/4: C-STS training data the examples come from.")]
PromptSeedOpt = Annotated[int, typer.Option(help="--encoding prompt: seed of the examples and invalid-answer draws.")]


@with_config_options(after="preset")
@user_errors
def train(
    train_data: TrainDataOpt,
    out: TrainOutOpt,
    validation: ValidationOpt = None,
    test: TestOpt = None,
    task: TrainTaskOpt = "csts",
    preset: PresetOpt = None,
    dataset: TrainDatasetOpt = None,
    manifest: TrainManifestOpt = None,
    seeds: SeedsOpt = None,
    device: ModelDeviceOpt = "auto",
    metrics_out: MetricsOutOpt = None,
    force: ForceOpt = False,
    **hyperparameters: Any,
) -> None:
    """Fine-tune a C-STS cross/bi/tri-encoder; keep the best epoch by validation Spearman (<out>/best/)."""
    from csts_pipeline.stages.train import train as stage

    folder = output_cache(out) if is_url(out) else Path(out)
    options = stage.TrainOptions(
        train=train_data,
        out=folder,
        validation=validation,
        test=test,
        config=train_config(preset, hyperparameters, _manifest_train_section(dataset, manifest)),
        device=device,
        metrics_out=metrics_out,
        task=task,
    )
    if seeds is not None:
        _train_seeds(options, seeds, force)
        return
    record = stage.run(options, force=force)
    if say_up_to_date(record, "--force retrains"):
        record = read_record(folder)
    else:
        typer.echo(
            f"train: done in {record['timings']['seconds']:.1f}s, {record['select']} epoch {record['selected_epoch']}"
        )
    _print_metrics(record["split_metrics"])


def _train_seeds(options: Any, seeds: str, force: bool) -> None:
    from csts_pipeline.stages.train.seeds import format_seed_table, parse_seeds, run_seeds

    result = run_seeds(options, parse_seeds(seeds), force=force)
    typer.echo(f"train: {len(result['runs'])} seeds in {options.out}/seed-*/")
    typer.echo(format_seed_table(result["metrics"]))


@user_errors
def evaluate(
    model: EvaluateModelOpt,
    data: DataOpt,
    task: EvaluateTaskOpt = "csts",
    split: SplitOpt = None,
    encoding: EncodingOpt = None,
    pooler: PoolerOpt = None,
    max_length: MaxLengthOpt = 128,
    batch_size: BatchSizeOpt = 64,
    precision: PrecisionOpt = None,
    device: ModelDeviceOpt = "auto",
    metrics_out: EvaluateMetricsOutOpt = Path("runs/evaluate/metrics.json"),
    instructions: InstructionsOpt = "short",
    instructions_file: InstructionsFileOpt = None,
    shots: ShotsOpt = 0,
    examples: ExamplesOpt = None,
    seed: PromptSeedOpt = 42,
    endpoint: EndpointOpt = None,
    api_key_env: ApiKeyEnvOpt = ModelSpec.api_key_env,
    timeout: TimeoutOpt = ModelSpec.timeout,
) -> None:
    """Spearman and Pearson (x100) of a model's similarity scores against the labels."""
    from csts_pipeline.stages.train import evaluate as stage
    from csts_pipeline.stages.train.data import read_csts
    from csts_pipeline.stages.train.prompting import PromptOptions

    if precision not in (None, "auto", "fp32", "fp16", "bf16"):
        raise UserError(f"--precision {precision!r}: use auto, fp32, fp16 or bf16")
    shown = read_csts(examples, "train") if examples is not None else None
    prompt = PromptOptions(instructions, instructions_file, shots, shown, seed)
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
        prompt=prompt,
        endpoint=endpoint,
        api_key_env=api_key_env,
        timeout=timeout,
    )
    results = stage.run(options)
    _print_metrics(results)
    for name, values in results.items():
        if "invalid_share" in values:
            typer.echo(f"{name}: {100 * values['invalid_share']:.1f}% invalid answers (replaced by U[1, 5] draws)")
    typer.echo(f"metrics: {metrics_out}")


def register(app: typer.Typer) -> None:
    """Add `train` and `evaluate` to `app`."""
    app.command("train")(train)
    app.command("evaluate")(evaluate)
