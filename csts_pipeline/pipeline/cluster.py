"""What a stage offers a cluster executor (pipeline.ray_executor), beyond the stage protocol (pipeline.stage).

A cluster executor pickles the stage after `prepare` and ships it to its workers, each of which runs `setup()`
itself: what `setup` builds for one worker (models, devices, lookups) is named in `worker_state` and left out of
the pickle, while what `prepare` computed for the units travels with the stage. Two optional hooks let a stage
use a cluster better; the local executor never needs them:

- `batch_pipeline(units, staging)` describes the units as rows through batch steps (stateless CPU functions, or
  classes run as an actor pool that loads a model once) and a driver-side `collect` that writes a unit's
  shard(s) once all its rows are back: the Ray executor runs it on Ray Data (embed: decode, then CLIP).
- `tasks.map(fn, items, shared)` inside `prepare` runs `fn(shared, item)` for every item: in a loop here, as Ray
  tasks sharing one object-store copy of `shared` under the Ray executor (mine: query blocks of the kNN search).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from csts_pipeline.pipeline.stage import Resources, Stage, Unit


@dataclass(frozen=True)
class BatchStep:
    """One step of a batch pipeline: `fn(batch) -> batch` on dicts of NumPy columns. A function runs as stateless
    tasks; a class runs as a pool of actors, each built once with `args` (a model loaded per actor)."""

    fn: Callable[..., Any]
    resources: Resources = field(default_factory=Resources)
    batch_size: int | None = None
    args: tuple = ()

    @property
    def stateful(self) -> bool:
        return isinstance(self.fn, type)


@dataclass
class BatchPipeline:
    """A stage's pending units as rows (`rows["unit"]`: the index of each row's unit) through `steps`; `collect`
    gets one unit's rows (in any order) once all are back, writes its output and returns its stats."""

    rows: dict[str, np.ndarray]
    steps: list[BatchStep]
    collect: Callable[[Unit, dict[str, np.ndarray], Path], dict[str, Any]]


class Tasks(Protocol):
    """How `prepare` fans out work: `map(fn, items, shared, resources)` yields fn(shared, item) in item order."""

    distributed: bool

    def map(self, fn: Callable[[Any, Any], Any], items: Iterable[Any], shared: Any, resources: Resources) -> Iterator:
        """fn(shared, item) for every item, in order."""
        ...


class SerialTasks:
    """`ClusterStage.tasks` under the local executor: every item in this process, in order."""

    distributed = False

    def map(self, fn: Callable[[Any, Any], Any], items: Iterable[Any], shared: Any, resources: Resources) -> Iterator:
        """fn(shared, item) for every item, in order."""
        for item in items:
            yield fn(shared, item)


class ClusterStage(Stage):
    """A stage that a cluster executor can ship to its workers and fan out."""

    # attributes `setup()` makes for one worker: never pickled, since every worker runs `setup()` again
    worker_state: tuple[str, ...] = ()
    # how `prepare` fans out work (SerialTasks); a cluster executor sets its own on the stage before the run
    tasks: Tasks = SerialTasks()

    def __getstate__(self) -> dict[str, Any]:
        """The stage without its per-worker state (models on a device are heavy, some not picklable at all)."""
        left_out = {*self.worker_state, "tasks"}  # the executor's task runner stays with the executor
        return {name: value for name, value in self.__dict__.items() if name not in left_out}

    def batch_pipeline(self, units: list[Unit], staging: Path) -> BatchPipeline | None:
        """The units as a batch pipeline, for an executor that runs one (Ray Data); None: `process` per unit."""
        return None
