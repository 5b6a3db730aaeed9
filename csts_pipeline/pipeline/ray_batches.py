"""A stage's `batch_pipeline` (pipeline.cluster.BatchPipeline) on Ray Data, for the Ray executor.

The rows become a dataset; each step becomes a `map_batches`: a function as stateless tasks, a class as an actor
pool (`concurrency` actors, each built once: a model loaded per actor, with `num_gpus` when the cluster has GPUs).
The driver consumes the stream, gathers each unit's rows and, once all of them are back, calls the stage's
`collect` (which writes the unit's shard atomically) and yields the unit's stats: the executor then writes its
completion marker, exactly as for `process`. Ray Data restarts a killed actor and retries its batches; a driver
that dies leaves the finished units' markers for the next run.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.cluster import BatchPipeline, BatchStep, ClusterStage
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.failpoints import armed, failpoint_once, forwarded
from csts_pipeline.pipeline.stage import Unit

log = logging.getLogger(__name__)
Batch = dict[str, np.ndarray]


def run_batches(
    executor: Any, stage: ClusterStage, batches: BatchPipeline, pending: list[Unit], staging: Path
) -> Iterator[tuple[Unit, dict[str, Any]]]:
    """(unit, stats) as each unit's rows are all back and collected, in any order."""
    import ray.data

    expected = np.bincount(batches.rows["unit"], minlength=len(pending))
    if (expected == 0).any():
        raise ValueError(f"{stage.name}: every unit of a batch pipeline needs at least one row")
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = executor.progress
    context.execution_options.verbose_progress = False
    logging.getLogger("ray.data").setLevel(max(logging.WARNING, log.getEffectiveLevel()))  # ours says enough
    dataset = ray.data.from_arrow(_blocks(batches.rows, batches.steps[0].batch_size or 1024))
    keys = [unit.key for unit in pending]
    for step in batches.steps:
        dataset = _map(executor, stage.name, dataset=dataset, step=step, keys=keys, units=len(pending))
    buffers: dict[int, list[Batch]] = defaultdict(list)
    received = np.zeros(len(pending), np.int64)
    try:
        for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
            for index, part in _by_unit(batch):
                buffers[index].append(part)
                received[index] += len(part["unit"])
                if received[index] == expected[index]:
                    rows = _concat(buffers.pop(index))
                    yield pending[index], batches.collect(pending[index], rows, staging)
    except Exception as exc:
        cause = _user_error(exc)
        if cause is not None:
            raise cause from None
        raise
    wrong = np.flatnonzero(received != expected)
    if len(wrong):
        first = int(wrong[0])
        raise RuntimeError(
            f"{stage.name}: Ray Data returned {received[first]} rows of {keys[first]}, not {expected[first]}"
        )


def _map(executor: Any, name: str, *, dataset: Any, step: BatchStep, keys: list[str], units: int) -> Any:
    """One step as `map_batches`: tasks for a function, an actor pool for a class."""
    import ray.data

    options = executor.options(step.resources) | forwarded()
    common = {"batch_size": step.batch_size, "batch_format": "numpy", "zero_copy_batch": True}
    if not step.stateful:
        return dataset.map_batches(step.fn, **common, **options)
    size = actor_pool_size(executor, options, units)
    executor.actors_used = max(executor.actors_used, size)
    log.info("%s: %s on %d Ray Data actors (%s each)", name, step.fn.__name__, size, options)
    args = (step.fn, step.args, name, keys)
    pool = ray.data.ActorPoolStrategy(size=size)
    # Ray Data hands every actor its constructor (the stage) as object-store references; with restarts allowed,
    # Ray logs an error-level core_worker line for each (ray#53727). No restarts: a lost actor fails the run,
    # and the next run resumes from the units already collected.
    options["max_restarts"] = 0
    return dataset.map_batches(_StepActor, fn_constructor_args=args, compute=pool, **common, **options)


def actor_pool_size(executor: Any, options: dict[str, Any], units: int) -> int:
    """One actor per GPU on a GPU cluster (the decoding tasks take the CPUs). Without GPUs, the steps ask for the
    same resources and Ray Data fuses the decoding into the actors; one CPU is still left free, so that a Ray
    that did not fuse them has a CPU for the decoding tasks."""
    total = executor.ray.cluster_resources()
    if options.get("num_gpus"):
        size = int(total.get("GPU", 0) / options["num_gpus"])
    else:
        size = int((total.get("CPU", 1) - 1) / max(options.get("num_cpus", 1), 1e-3))
    if executor.max_actors is not None:
        size = min(size, executor.max_actors)
    return max(1, min(size, units))


class _StepActor:
    """The actor Ray Data builds for a class step: the stage's class, plus the tests' failpoint per unit."""

    def __init__(self, cls: type, args: tuple, stage: str, keys: list[str]):
        self.inner, self.stage, self.keys = cls(*args), stage, keys

    def __call__(self, batch: Batch) -> Batch:
        if armed():
            for index in np.unique(batch["unit"]).tolist():
                failpoint_once(f"{self.stage}:unit:{self.keys[index]}")
        return self.inner(batch)


def _blocks(rows: Batch, size: int) -> list[pa.Table]:
    """The rows as Arrow tables of `size` rows: Ray Data's first blocks, so the first step starts in parallel."""
    table = pa.table({name: pa.array(column) for name, column in rows.items()})
    return [table.slice(lo, size) for lo in range(0, max(table.num_rows, 1), size)]


def _by_unit(batch: Batch) -> Iterator[tuple[int, Batch]]:
    """(unit index, its rows) for every unit with rows in `batch`."""
    order = np.argsort(batch["unit"], kind="stable")
    units = batch["unit"][order]
    starts = np.flatnonzero(np.r_[True, units[1:] != units[:-1]])
    ends = np.r_[starts[1:], len(units)]
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        take = order[lo:hi]
        yield int(units[lo]), {name: column[take] for name, column in batch.items()}


def _concat(parts: list[Batch]) -> Batch:
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def _user_error(exc: BaseException) -> UserError | None:
    """A UserError raised in a task or actor, however Ray Data wrapped it; it reaches the CLI as one line."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        if isinstance(found, UserError):
            return found
        cause = getattr(found, "cause", None)
        found = cause if isinstance(cause, BaseException) else (found.__cause__ or found.__context__)
    return None
