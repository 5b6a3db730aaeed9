"""The stage registry: the data stages in the order they run. Each stage package declares its own `SPEC` (name,
upstream, what it reads, where its class is), importing its upstream's, so the chain embed -> mine -> filter is
written as imports; the executor checks every upstream record before a stage plans (pipeline.executor.
check_upstream) and the command line makes `run`, `status` and one command per stage from this list
(csts_pipeline/cli/stages.py). Stages meet only at their on-disk Parquet schemas (docs/schemas.md)."""

from __future__ import annotations

from csts_pipeline.pipeline.stage import StageSpec
from csts_pipeline.stages.embed import SPEC as EMBED
from csts_pipeline.stages.filter import SPEC as FILTER
from csts_pipeline.stages.mine import SPEC as MINE

REGISTRY: tuple[StageSpec, ...] = (EMBED, MINE, FILTER)


def spec(name: str) -> StageSpec:
    """The registered stage called `name`."""
    return next(entry for entry in REGISTRY if entry.name == name)
