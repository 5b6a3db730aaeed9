"""The stage protocol: what every data stage gives an executor (pipeline.executor).

A stage turns its upstream stage's committed output into its own, as units of work (shards):

- `plan()` names the parameters and input fingerprints that identify the output, and the units when they are
  known without heavy work. It is cheap and imports no model library, so `status` stays fast.
- `setup()` loads models and checks devices, once per worker, before the stage folder changes.
- `prepare(staging)` does the whole-stage work that units share (a kNN search, a captions table) and returns the
  units; by default the planned ones.
- `process(unit, staging)` reads its inputs from files, writes its shard(s) atomically and returns its stats, a
  JSON-able dict. `process_many` may stream several units through one loader; by default it calls `process`.
- `finish(stats, staging)` merges the units' stats into the record's counts and extra fields.

Executors own everything else: locks, staging folders, resume, progress, logging, verification and the commit.

A cluster executor (pipeline.ray_executor) pickles the stage after `prepare` and ships it to its workers, each of
which runs `setup()` itself: what `setup` builds for one worker (models, devices, lookups) is named in
`worker_state` and left out of the pickle, while what `prepare` computed for the units travels with the stage.

Two optional hooks let a stage use a cluster better; the local executor never needs them:

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
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Resources:
    """What one worker of a stage needs; the local executor reports it, a cluster executor schedules by it."""

    cpus: float = 1.0
    gpus: float = 0.0


@dataclass(frozen=True)
class Unit:
    """One shard of work. `key` names it uniquely within the stage (its completion marker is keyed by it);
    `payload` is the stage's own JSON-able description of the work."""

    key: str
    payload: Any = None
    size: int = 1  # in the stage's own items (images, pairs): what progress counts


@dataclass
class StagePlan:
    """What identifies a stage's output: a fingerprint over `params` and `inputs`."""

    params: dict[str, Any]
    inputs: dict[str, str]
    units: list[Unit] | None = None


@dataclass
class StageResult:
    """What `finish` returns: record counts, and any further record fields."""

    counts: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchStep:
    """One step of a batch pipeline: `fn(batch) -> batch` on dicts of NumPy columns. A function runs as stateless
    tasks; a class runs as a pool of actors, each built once with `args` (a model loaded per actor)."""

    fn: Callable[..., Any]
    resources: Resources = Resources()
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


class SerialTasks:
    """`Stage.tasks` under the local executor: every item in this process, in order."""

    distributed = False

    def map(self, fn: Callable[[Any, Any], Any], items: Iterable[Any], shared: Any, resources: Resources) -> Iterator:
        """fn(shared, item) for every item, in order."""
        for item in items:
            yield fn(shared, item)


class Stage:
    """Base class of the data stages; see the module docstring for the life of a run."""

    name: str = ""
    upstream: str | None = None
    resources: Resources = Resources()
    # attributes `setup()` makes for one worker: never pickled, since every worker runs `setup()` again
    worker_state: tuple[str, ...] = ()
    # how `prepare` fans out work (SerialTasks); a cluster executor sets its own on the stage before the run
    tasks: SerialTasks = SerialTasks()

    def __init__(self, work_dir: Path):
        self.work_dir = work_dir

    def __getstate__(self) -> dict[str, Any]:
        """The stage without its per-worker state (models on a device are heavy, some not picklable at all)."""
        left_out = {*self.worker_state, "tasks"}  # the executor's task runner stays with the executor
        return {name: value for name, value in self.__dict__.items() if name not in left_out}

    @property
    def folder(self) -> Path:
        return self.work_dir / self.name

    def plan(self) -> StagePlan:
        raise NotImplementedError

    def setup(self) -> None:
        """Load models, resolve devices: what can fail before the work starts."""

    def prepare(self, staging: Path, plan: StagePlan) -> list[Unit]:
        if plan.units is None:
            raise NotImplementedError(f"{self.name}: plan() gave no units, so prepare() must")
        return plan.units

    def process(self, unit: Unit, staging: Path) -> dict[str, Any]:
        raise NotImplementedError

    def process_many(self, units: list[Unit], staging: Path) -> Iterator[tuple[Unit, dict[str, Any]]]:
        for unit in units:
            yield unit, self.process(unit, staging)

    def batch_pipeline(self, units: list[Unit], staging: Path) -> BatchPipeline | None:
        """The units as a batch pipeline, for an executor that runs one (Ray Data); None: `process` per unit."""
        return None

    def finish(self, stats: list[dict[str, Any]], staging: Path) -> StageResult:
        raise NotImplementedError
