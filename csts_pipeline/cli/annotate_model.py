"""`csts-pipeline annotate rate|draft|check-conditions`: a language model in the round trip, as one more worker
that rates, a drafter of conditions and a checker of them (pipeline/language_model/: models
in the loop). The commands join `annotate_app` when cli/__init__.py imports this module."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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
)
from csts_pipeline.pipeline.errors import UserError

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


def _model_spec(model: str | None, endpoint: str | None, api_key_env: str, batch_size: int, device: str, **how):
    """The model to ask; `how`: timeout, run_timeout, read (an endpoint's)."""
    from csts_pipeline.pipeline.language_model import ModelSpec

    spec = ModelSpec(model, endpoint, api_key_env, batch_size, device=device, **how)
    spec.check()
    return spec


@annotate_app.command("rate")
@user_errors
def annotate_rate(
    ctx: typer.Context,
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    model: LmModelOpt = None,
    endpoint: EndpointOpt = None,
    api_key_env: ApiKeyEnvOpt = "OPENAI_API_KEY",
    batch_size: LmBatchOpt = 8,
    device: ModelDeviceOpt = "auto",
    similarity_model: SimilarityModelOpt = None,
    timeout: TimeoutOpt = 60.0,
    run_timeout: RunTimeoutOpt = None,
    read: ReadOpt = "auto",
    out: AnnotateOutOpt = None,
    force: ForceOpt = False,
) -> None:
    """A language model (or, with --similarity-model, a similarity model) rates every item of the ratings export
    as one more worker, model:<name> (<annotate>/model_ratings/); the ratings import takes its rows with the
    people's. An option the kind of model ignores is refused (--timeout with --similarity-model)."""
    if similarity_model is not None:
        if model is not None or endpoint is not None:
            raise UserError("--similarity-model replaces --model and --endpoint; give one kind of model")
        refuse_what_does_not_apply(ctx, "--similarity-model")
        _rate_similarity(
            name=similarity_model,
            dataset=dataset,
            manifest=manifest,
            batch_size=batch_size,
            device=device,
            out=out,
            force=force,
        )
        return
    from csts_pipeline.stages.annotate.steps.model_ratings import describe_rate, rate

    refuse_for_language_model(ctx, model, endpoint, ())
    spec = _model_spec(
        model, endpoint, api_key_env, batch_size, device, timeout=timeout, run_timeout=run_timeout, read=read
    )
    folder, _ = annotate_folder(dataset, manifest, out)
    record = rate(folder, spec, force)
    if not say_up_to_date(record):
        typer.echo(describe_rate(record))


def _rate_similarity(*, name: str, dataset, manifest, batch_size: int, device: str, out, force: bool) -> None:
    from csts_pipeline.stages.annotate.steps import similarity_rater

    folder, _ = annotate_folder(dataset, manifest, out)
    record = similarity_rater.rate_similarity(folder, name, force, batch_size, device)
    if not say_up_to_date(record):
        typer.echo(similarity_rater.describe_similarity(record))


@annotate_app.command("draft")
@user_errors
def annotate_draft(
    ctx: typer.Context,
    stage: AnnotateStageOpt,
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    model: LmModelOpt = None,
    endpoint: EndpointOpt = None,
    api_key_env: ApiKeyEnvOpt = "OPENAI_API_KEY",
    batch_size: LmBatchOpt = 8,
    device: ModelDeviceOpt = "auto",
    timeout: TimeoutOpt = 60.0,
    run_timeout: RunTimeoutOpt = None,
    read: ReadOpt = "auto",
    min_applies: Annotated[
        float,
        typer.Option(
            "--min-applies",
            help="Keep a draft only when the model's P(it applies to both sentences) is at least this (0: keep "
            "every draft that passes the page's checks).",
        ),
    ] = 0.5,
    out: AnnotateOutOpt = None,
    force: ForceOpt = False,
) -> None:
    """A language model drafts a high and a low condition per exported condition-writing task
    (<annotate>/condition_drafts/); export conditions again to prefill the page with those that pass the checks.
    An option the kind of model ignores is refused (--timeout without --endpoint)."""
    from csts_pipeline.stages.annotate.steps.drafts import describe_drafts, draft

    if stage != "conditions":
        raise UserError(f"--stage {stage!r}: only conditions can be drafted")
    refuse_for_language_model(ctx, model, endpoint, ("stage", "min_applies"))
    spec = _model_spec(
        model, endpoint, api_key_env, batch_size, device, timeout=timeout, run_timeout=run_timeout, read=read
    )
    folder, _ = annotate_folder(dataset, manifest, out)
    record = draft(folder, spec, force, min_applies)
    if not say_up_to_date(record):
        typer.echo(describe_drafts(record))


@annotate_app.command("check-conditions")
@user_errors
def annotate_check_conditions(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Argument(help="A C-STS file or conditions.parquet: sentence1, sentence2, condition columns.")
    ],
    model: LmModelOpt = None,
    endpoint: EndpointOpt = None,
    api_key_env: ApiKeyEnvOpt = "OPENAI_API_KEY",
    batch_size: LmBatchOpt = 8,
    device: ModelDeviceOpt = "auto",
    timeout: TimeoutOpt = 60.0,
    run_timeout: RunTimeoutOpt = None,
    read: ReadOpt = "auto",
    below: Annotated[
        float, typer.Option("--below", help="Doubtful when P(yes) to either question is below this.")
    ] = 0.5,
    out: Annotated[
        Path | None, typer.Option("--out", help="Folder for doubtful.csv and checked.parquet (default: FILE_check/).")
    ] = None,
    force: ForceOpt = False,
) -> None:
    """Ask the model whether each condition applies to both sentences and names an attribute, not a value; the
    doubtful ones go to doubtful.csv for a manual verdict. An option the kind of model ignores is refused."""
    from csts_pipeline.stages.annotate.steps.condition_check import check_conditions, describe_check

    refuse_for_language_model(ctx, model, endpoint, ("file", "below"))
    spec = _model_spec(
        model, endpoint, api_key_env, batch_size, device, timeout=timeout, run_timeout=run_timeout, read=read
    )
    folder = out if out is not None else file.with_name(f"{file.stem}_check")
    record = check_conditions(file, folder, spec, below, force)
    if not say_up_to_date(record):
        typer.echo(describe_check(record))
