"""The stage registry: the data stages in the order they run, each with its name, its upstream stage, what it
reads and where its code is. The executor checks every upstream record before a stage plans (pipeline.executor.
check_upstream); the command line makes `run`, `status` and one command per stage from this list
(csts_pipeline/cli.py). Stages meet only at their on-disk Parquet schemas (docs/schemas.md)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any


@dataclass(frozen=True)
class StageSpec:
    """One data stage. `entry` ("module:Class") is imported only when the stage runs: the stages pull in numba,
    torch and open_clip, which `--help` and `status` do without."""

    name: str
    upstream: str | None
    inputs: tuple[str, ...]
    help: str
    entry: str
    summary: str | None = None  # "module:function" (record, manifest) -> lines the CLI prints after a run

    def summary_lines(self, record: dict[str, Any], manifest: Any) -> list[str]:
        """What this stage adds to the one-line summary of a run (a funnel, reader skips); nothing by default."""
        if self.summary is None:
            return []
        module, _, name = self.summary.partition(":")
        return list(getattr(import_module(module), name)(record, manifest))

    @property
    def command(self) -> str:
        """The command that (re)builds this stage's output."""
        return f"csts-pipeline {self.name}"

    def load(self) -> Any:
        """The stage's class (a pipeline.stage.Stage subclass whose `name` and `upstream` are these)."""
        module, _, name = self.entry.partition(":")
        return getattr(import_module(module), name)


REGISTRY: tuple[StageSpec, ...] = (
    StageSpec(
        "embed",
        None,
        ("data.captions", "data.images"),
        "Encode every image with the manifest's open_clip model into Parquet shards (<out>/embed/).",
        "csts_pipeline.stages.embed.stage:EmbedStage",
        "csts_pipeline.stages.embed.stage:summary_lines",
    ),
    StageSpec(
        "mine",
        "embed",
        ("embed/embeddings", "embed/captions"),
        "Top-k image neighbours (exact, or approximate with measured recall) expanded to caption pairs (<out>/mine/).",
        "csts_pipeline.stages.mine.stage:MineStage",
    ),
    StageSpec(
        "filter",
        "mine",
        ("mine/candidates", "mine/captions"),
        "Keep the candidate pairs meeting the C-STS criteria (<out>/filter/), print the funnel; or score --pairs.",
        "csts_pipeline.stages.filter.stage:FilterStage",
        "csts_pipeline.stages.filter.stage:summary_lines",
    ),
)


def spec(name: str) -> StageSpec:
    """The registered stage called `name`."""
    return next(entry for entry in REGISTRY if entry.name == name)
