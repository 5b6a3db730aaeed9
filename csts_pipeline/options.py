"""Option types and the error handling shared by the command modules (cli.py, annotate_cli.py), kept apart so
that a sub-app does not import cli.py (which imports the sub-apps)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from pipeline.errors import UserError

DatasetOpt = Annotated[
    str | None,
    typer.Option("--dataset", "-d", help="Manifest name: manifests/NAME.yaml (coco, flickr30k, sample)."),
]
ManifestOpt = Annotated[Path | None, typer.Option("--manifest", "-m", help="Path to any manifest YAML file.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Recompute even when the stage's output is up to date.")]


def user_errors(command: Callable[..., None]) -> Callable[..., None]:
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
