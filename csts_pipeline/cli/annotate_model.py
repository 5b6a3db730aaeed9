"""`csts-pipeline annotate rate|draft|check-conditions`: a language model in the round trip, as one more worker
that rates, a drafter of conditions and a checker of them (pipeline/language_model/: models
in the loop). The commands join `annotate_app` when cli/__init__.py imports this module."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer

from csts_pipeline.cli.annotate import AnnotateOutOpt, AnnotateStageOpt, annotate_app, annotate_folder
from csts_pipeline.cli.options import (
    ApiKeyEnvOpt,
    DatasetOpt,
    EndpointOpt,
    ForceOpt,
    ManifestOpt,
    ModelDeviceOpt,
    TimeoutOpt,
    given_options,
    say_up_to_date,
    user_errors,
    with_options,
)
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.model_spec import ModelSpec
from csts_pipeline.stages.annotate.steps.options import ConditionCheckOptions, DraftOptions

LmModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="A language model: a Hugging Face name, a local folder or a .gguf file (loaded with transformers); "
        "with --endpoint, the served model's name (default: the first the server lists).",
    ),
]
SimilarityModelOpt = Annotated[
    str | None,
    typer.Option(
        "--similarity-model",
        help="Instead of a language model, a similarity model: a `csts-pipeline train` output folder, or a "
        "sentence-transformers model by name or path (packaged:all-MiniLM-L6-v2 needs no download). Its score is its "
        "answer: the ratings import reads it, as the normal score of its rank in the batch, through a density per "
        "true label that it learns against people and gold.",
    ),
]
LmBatchOpt = Annotated[int, typer.Option("--batch-size", help="Prompts per forward pass, or requests at a time.")]
RunTimeoutOpt = Annotated[
    float | None, typer.Option("--run-timeout", help="Endpoint: seconds all the run's requests may take (no limit).")
]
ReadOpt = Annotated[
    str,
    typer.Option(
        "--read",
        help="Endpoint: how answers are read: logprobs, samples, or auto (logprobs; samples for a reply without).",
    ),
]

# the options that choose the model, one per ModelSpec field the command line sets
MODEL_OPTIONS = {
    "model": LmModelOpt,
    "endpoint": EndpointOpt,
    "api_key_env": ApiKeyEnvOpt,
    "batch_size": LmBatchOpt,
    "device": ModelDeviceOpt,
    "timeout": TimeoutOpt,
    "run_timeout": RunTimeoutOpt,
    "read": ReadOpt,
}


def with_model_options(after: str) -> Any:
    """Give a command taking `**model_options` the options that choose its model, after its option `after`, each
    with ModelSpec's default: declared once for rate, draft and check-conditions."""
    defaults = {field.name: field.default for field in fields(ModelSpec)}
    return with_options(
        after,
        [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults[name], annotation=option)
            for name, option in MODEL_OPTIONS.items()
        ],
    )


# what each kind of model takes besides the folder's options (--dataset, --manifest, --out, --force)
RATE_KINDS = {
    "--similarity-model": ("a similarity model", ("similarity_model", "batch_size", "device")),
    "--endpoint": (
        "a language model server",
        ("endpoint", "model", "api_key_env", "batch_size", "timeout", "run_timeout", "read"),
    ),
    "--model": ("a local language model", ("model", "batch_size", "device")),
}
FOLDER_OPTIONS = ("dataset", "manifest", "out", "force")


def refuse_what_does_not_apply(ctx: typer.Context, kind: str, own: tuple[str, ...] = ()) -> None:
    """Every option given on the command line (or by its environment variable) that the kind of model in use
    ignores is refused in one line, instead of being dropped in silence (`--timeout 0` with a similarity model).
    `own`: the command's options that are not the model's (draft's --stage, check-conditions' --below)."""
    words, takes = RATE_KINDS[kind]
    flags = {param.name: param.opts[0] for param in ctx.command.params if param.name}
    given = given_options(ctx)
    refused = [flags[name] for name in given if name not in (*takes, *FOLDER_OPTIONS, *own)]
    if refused:
        also = ", ".join(flags[name] for name in takes if flags[name] != kind)
        without = " without --endpoint" if kind == "--model" else ""
        raise UserError(f"{', '.join(refused)}: not for {kind}{without} ({words}), which takes {also}")


def refuse_for_language_model(
    ctx: typer.Context, model: str | None, endpoint: str | None, own: tuple[str, ...]
) -> None:
    """rate, draft and check-conditions ask a language model, local (--model) or served (--endpoint): what that
    kind ignores is refused. With neither, ModelSpec.check says what is missing (not "--timeout: not for --model")."""
    if model is not None or endpoint is not None:
        refuse_what_does_not_apply(ctx, "--model" if endpoint is None else "--endpoint", own)


def _model_spec(model_options: dict[str, Any]) -> ModelSpec:
    """The model to ask, from the options that choose it."""
    spec = ModelSpec(**model_options)
    spec.check()
    return spec


@annotate_app.command("rate")
@with_model_options(after="manifest")
@user_errors
def annotate_rate(
    ctx: typer.Context,
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    similarity_model: SimilarityModelOpt = None,
    out: AnnotateOutOpt = None,
    force: ForceOpt = False,
    **model_options: Any,
) -> None:
    """A language model (or, with --similarity-model, a similarity model) rates every item of the ratings export
    as one more worker, model:<name> (<annotate>/model_ratings/); the ratings import takes its rows with the
    people's. An option the kind of model ignores is refused (--timeout with --similarity-model)."""
    if similarity_model is not None:
        if model_options["model"] is not None or model_options["endpoint"] is not None:
            raise UserError("--similarity-model replaces --model and --endpoint; give one kind of model")
        refuse_what_does_not_apply(ctx, "--similarity-model")
        folder, _ = annotate_folder(dataset, manifest, out)
        _rate_similarity(
            folder,
            similarity_model,
            batch_size=model_options["batch_size"],
            device=model_options["device"],
            force=force,
        )
        return
    from csts_pipeline.stages.annotate.steps.model_ratings import describe_rate, rate

    refuse_for_language_model(ctx, model_options["model"], model_options["endpoint"], ())
    spec = _model_spec(model_options)
    folder, _ = annotate_folder(dataset, manifest, out)
    record = rate(folder, spec, force=force)
    if not say_up_to_date(record):
        typer.echo(describe_rate(record))


def _rate_similarity(folder: Path, name: str, *, batch_size: int, device: str, force: bool) -> None:
    from csts_pipeline.stages.annotate.steps import similarity_rater

    record = similarity_rater.rate_similarity(folder, name, force=force, batch_size=batch_size, device=device)
    if not say_up_to_date(record):
        typer.echo(similarity_rater.describe_similarity(record))


MinAppliesOpt = Annotated[
    float,
    typer.Option(
        "--min-applies",
        help="Keep a draft only when the model's P(it applies to both sentences) is at least this (0: keep every "
        "draft that passes the page's checks).",
    ),
]


@annotate_app.command("draft")
@with_model_options(after="manifest")
@user_errors
def annotate_draft(
    ctx: typer.Context,
    stage: AnnotateStageOpt,
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    min_applies: MinAppliesOpt = DraftOptions.min_applies,
    out: AnnotateOutOpt = None,
    force: ForceOpt = False,
    **model_options: Any,
) -> None:
    """A language model drafts a high and a low condition per exported condition-writing task
    (<annotate>/condition_drafts/); export conditions again to prefill the page with those that pass the checks.
    An option the kind of model ignores is refused (--timeout without --endpoint)."""
    from csts_pipeline.stages.annotate.steps.drafts import describe_drafts, draft

    if stage != "conditions":
        raise UserError(f"--stage {stage!r}: only conditions can be drafted")
    refuse_for_language_model(ctx, model_options["model"], model_options["endpoint"], ("stage", "min_applies"))
    spec = _model_spec(model_options)
    folder, _ = annotate_folder(dataset, manifest, out)
    record = draft(folder, spec, force=force, min_applies=min_applies)
    if not say_up_to_date(record):
        typer.echo(describe_drafts(record))


CheckedFileArg = Annotated[
    Path, typer.Argument(help="A C-STS file or conditions.parquet: sentence1, sentence2, condition columns.")
]
BelowOpt = Annotated[float, typer.Option("--below", help="Doubtful when P(yes) to either question is below this.")]
CheckOutOpt = Annotated[
    Path | None, typer.Option("--out", help="Folder for doubtful.csv and checked.parquet (default: FILE_check/).")
]


@annotate_app.command("check-conditions")
@with_model_options(after="file")
@user_errors
def annotate_check_conditions(
    ctx: typer.Context,
    file: CheckedFileArg,
    below: BelowOpt = ConditionCheckOptions.below,
    out: CheckOutOpt = None,
    force: ForceOpt = False,
    **model_options: Any,
) -> None:
    """Ask the model whether each condition applies to both sentences and names an attribute, not a value; the
    doubtful ones go to doubtful.csv for a manual verdict. An option the kind of model ignores is refused."""
    from csts_pipeline.stages.annotate.steps.condition_check import check_conditions, describe_check

    refuse_for_language_model(ctx, model_options["model"], model_options["endpoint"], ("file", "below"))
    spec = _model_spec(model_options)
    folder = out if out is not None else file.with_name(f"{file.stem}_check")
    record = check_conditions(file, folder, spec, below=below, force=force)
    if not say_up_to_date(record):
        typer.echo(describe_check(record))
