"""embed's own options (the common ones are cli.stages.COMMON): name -> (type, the manifest key it overrides)."""

from __future__ import annotations

from typing import Annotated

import typer

from csts_pipeline.cli.stages import Option

BatchOpt = Annotated[int | None, typer.Option(help="Images per batch for embed (overrides embed.batch_size).")]
DecodeOpt = Annotated[
    str | None,
    typer.Option(
        help="JPEG decode: workers (PIL in DataLoader workers), device (on the model's device: nvImageCodec where "
        "installed, else torchvision), nvimgcodec, torchvision or auto."
    ),
]
WorkersOpt = Annotated[int | None, typer.Option(help="DataLoader worker processes (overrides embed.num_workers).")]

OPTIONS: dict[str, Option] = {
    "batch_size": (BatchOpt, "embed.batch_size"),
    "decode": (DecodeOpt, "embed.decode"),
    "num_workers": (WorkersOpt, "embed.num_workers"),
}
