"""Option types and the error decorator shared by the command modules (cli/__init__.py, cli/train.py, cli/annotate.py,
cli/annotate_model.py): options more than one command family takes, so that every command module can import this
one and none imports another for an option."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
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
