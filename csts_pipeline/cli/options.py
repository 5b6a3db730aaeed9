"""Option types and the error decorator shared by the command modules (cli/__init__.py, cli/train.py, cli/annotate.py,
cli/annotate_model.py): options more than one command family takes, so that every command module can import this
one and none imports another for an option."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any

import typer

from csts_pipeline.pipeline.errors import UserError, environment_line
from csts_pipeline.pipeline.manifest import PRECISION_HELP

DatasetOpt = Annotated[
    str | None,
    typer.Option(
        "--dataset", "-d", help="Manifest name: ./manifests/NAME.yaml, else the bundled NAME (coco, flickr30k, sample)."
    ),
]
# a string, not a Path: Path would fold `memory://x` into `memory:/x` (pipeline.urls.location)
ManifestOpt = Annotated[
    str | None, typer.Option("--manifest", "-m", help="Path or URL (s3://, gs://, hf://, ...) of a manifest YAML file.")
]
DeviceOpt = Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:N (overrides run.device).")]
# metavar="": a flag takes no value, so its help shows none (typer would print `<bool>`)
ForceOpt = Annotated[
    bool, typer.Option("--force", metavar="", help="Recompute even when the stage's output is up to date.")
]
PrecisionOpt = Annotated[str | None, typer.Option(help=PRECISION_HELP)]

# the model options of every command that runs or asks a model (annotate rate/draft/check-conditions, evaluate,
# train), declared once here
ModelDeviceOpt = Annotated[str, typer.Option("--device", help="A local model's device: auto, cpu, cuda or cuda:N.")]
EndpointOpt = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        help="Base URL of an OpenAI-compatible server (vLLM, llama.cpp, Ollama, a hosted API), e.g. "
        "http://127.0.0.1:8000/v1, serving the language model instead of a local one.",
    ),
]
ApiKeyEnvOpt = Annotated[
    str,
    typer.Option(
        "--api-key-env", help="Environment variable holding the endpoint's API key (never written to a record)."
    ),
]

TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout",
        help="Endpoint: seconds one request may take, all its tries and waits together; a server silent that long "
        "is a one-line error.",
    ),
]


def with_options(after: str, options: list[inspect.Parameter]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command taking `**options` these options, placed after its option `after`: a block of options that
    several commands take (train's hyperparameters, the model's of annotate rate, draft and check-conditions) is
    declared once, with the defaults of the object it fills."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command, eval_str=True)
        params = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in signature.parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        at = [p.name for p in params].index(after) + 1
        params[at:at] = options
        command.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        return command

    return decorate


def given_options(ctx: typer.Context) -> dict[str, str]:
    """name -> flag of each option given on the command line or by its environment variable, not defaulted: the one
    way a command tells which options the user asked for, to refuse those that do not apply."""
    flags = {param.name: param.opts[0] for param in ctx.command.params if param.name}
    # by the source's name: typer may carry its own copy of click, with its own ParameterSource
    return {
        name: flag
        for name, flag in flags.items()
        if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
    }


def refuse_options_of_others(
    ctx: typer.Context, chosen: str, takes: Mapping[str, Iterable[str]], common: Iterable[str] = ()
) -> None:
    """Refuse in one line every option given that the mode `chosen` (a key of `takes`, e.g. "--stage bws") does not
    take, naming the modes that do: an option that does not apply is an error, never dropped in silence."""
    refused = []
    for name, flag in given_options(ctx).items():
        if name in common or name in takes[chosen]:
            continue
        takers = [mode for mode, names in takes.items() if name in names]
        refused.append(f"{flag}: only for {_either(takers, chosen)}, not for {chosen}")
    if refused:
        raise UserError("; ".join(refused))


def _either(modes: list[str], chosen: str) -> str:
    """ "--stage a, --stage b or --stage c" as "--stage a, b or c" when they share their flag with `chosen`."""
    flag = chosen.split(" ", 1)[0] + " "
    if all(mode.startswith(flag) for mode in modes):
        modes = [modes[0], *(mode.removeprefix(flag) for mode in modes[1:])]
    *others, last = modes
    return f"{', '.join(others)} or {last}" if others else last


def say_up_to_date(record: dict[str, Any], redo: str = "--force recomputes") -> bool:
    """The one way a command says it had nothing to do; True when `record` is such a marker."""
    if record.get("status") != "up-to-date":
        return False
    typer.echo(f"up to date: {record['folder']} (nothing to do; {redo})")
    return True


def user_errors(command: Callable[..., None]) -> Callable[..., None]:
    """Print a user mistake, or an environment fault (pipeline.errors.environment_line), as one line and exit 2,
    instead of a traceback: every command goes through here, so none can forget it."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        logging.getLogger("csts_pipeline").setLevel(logging.INFO)
        try:
            command(*args, **kwargs)
        except UserError as exc:
            typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2) from None
        except OSError as exc:
            line = environment_line(exc)
            if line is None:
                raise
            typer.secho(f"error: {line}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2) from None

    return wrapper
