"""The Ray executor: the local executor's run, with the units processed by a pool of Ray actors.

Everything but the units stays on the driver, in the code of pipeline.executor: locks, plan, the up-to-date check,
`recover`, the staging folder, `setup` (its failures come before anything is written; filter's fills the sentence
embedding cache, so the actors read it instead of all encoding at once), `prepare` (mine's kNN search), the
completion markers, `finish`, the record and the commit. Only `_run_units` differs: the stage is pickled once
after `prepare` (without its `worker_state`, pipeline.cluster) and handed to each actor, which runs `setup()` once
and then `process(unit, staging)` per unit; results stream back as they finish and the driver writes each marker.
A stage that offers a `batch_pipeline` (embed) runs on Ray Data instead (pipeline.ray_batches), and a stage's
`tasks.map` in `prepare` (mine's query blocks) becomes Ray tasks sharing one object-store copy of their input.

Workers write their shards into the staging folder themselves, so `work_dir` must be a filesystem that the driver
and every worker see at the same path (one machine, or a shared mount); docs/ray.md.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.cluster import ClusterStage
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.executor import LocalExecutor
from csts_pipeline.pipeline.failpoints import failpoint, forwarded
from csts_pipeline.pipeline.stage import Resources, Stage, Unit

log = logging.getLogger(__name__)
RAY_EXTRA = "pip install 'csts-pipeline[ray]'"
IN_FLIGHT_PER_ACTOR = 2  # one unit running, one queued: an actor never waits for the driver between units


# Ray's own switch for single-machine use: with it off, a local Ray takes 127.0.0.1 as its node address, so it
# listens on loopback only and its processes talk over loopback. Read when `ray` is imported, inherited by its
# processes; set only when this process starts its own local Ray, never when joining a cluster.
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def import_ray(local: bool = False) -> Any:
    """The `ray` module, or a one-line UserError naming the extra that installs it; `local` keeps a Ray that this
    process starts on loopback."""
    if local and "ray" not in sys.modules:
        for name, value in LOOPBACK_ONLY.items():
            os.environ.setdefault(name, value)
    try:
        import ray
    except ImportError:
        raise UserError(f"--executor ray needs Ray, which is not installed: {RAY_EXTRA}") from None
    return ray


class StageWorker:
    """A Ray actor (made remote in `RayExecutor._actors`): one stage's `setup()` once, then its units."""

    def __init__(self, stage: Stage):
        self.stage = stage
        stage.setup()

    def process(self, unit: Unit, staging: str) -> dict[str, Any]:
        failpoint(f"{self.stage.name}:unit:{unit.key}")  # tests: a worker dies inside a unit
        return self.stage.process(unit, Path(staging))


class RayExecutor(LocalExecutor):
    """Runs a stage's units on a Ray cluster: `address` None starts a local Ray (without the dashboard),
    "auto" joins the cluster of this machine, anything else is passed to `ray.init(address=...)`."""

    def __init__(self, address: str | None = None, progress: bool = True, max_actors: int | None = None):
        super().__init__(progress)
        self.ray = import_ray(local=address is None)
        self.address = address
        self.max_actors = max_actors
        self.actors_used = 0

    def describe(self) -> dict[str, Any]:
        return {"kind": "ray", "address": self.address or "local", "actors": self.actors_used}

    def run(self, stage: Stage, force: bool = False) -> dict[str, Any]:
        if isinstance(stage, ClusterStage):
            stage.tasks = RayTasks(self)  # `prepare` fans out as Ray tasks; left out of the stage's pickle
        return super().run(stage, force)

    def connect(self) -> None:
        """Join or start Ray once per process; a run with nothing to do never gets here."""
        ray = self.ray
        if ray.is_initialized():
            return
        if self.address is None:
            # no dashboard, and loopback only (LOOPBACK_ONLY)
            ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING)
        else:
            ray.init(address=self.address, logging_level=logging.WARNING)

    def actor_options(self, stage: Stage) -> dict[str, float]:
        """Ray resources of one actor: the stage's own, with GPUs only when the cluster has any."""
        return self.options(stage.resources)

    def options(self, resources: Resources) -> dict[str, float]:
        """`num_cpus`/`num_gpus` for these resources, with GPUs only when the cluster has any."""
        has_gpus = self.ray.cluster_resources().get("GPU", 0) > 0
        return {"num_cpus": resources.cpus, "num_gpus": resources.gpus if has_gpus else 0}

    def pool_size(self, options: dict[str, float], pending: int) -> int:
        """As many actors as the cluster fits at once (by CPUs and GPUs), at most one per pending unit."""
        total = self.ray.cluster_resources()
        fits = [
            int(total.get(kind, 0) / need)
            for kind, need in (("CPU", options["num_cpus"]), ("GPU", options["num_gpus"]))
            if need > 0
        ]
        size = min([pending, *fits]) if fits else pending
        if self.max_actors is not None:
            size = min(size, self.max_actors)
        return max(1, size)

    def _run_units(self, stage: Stage, pending: list[Unit], staging: Path) -> Iterator[tuple[Unit, dict[str, Any]]]:
        self.actors_used = 0
        if not pending:
            return
        self.connect()
        batches = stage.batch_pipeline(pending, staging) if isinstance(stage, ClusterStage) else None
        if batches is not None and isinstance(stage, ClusterStage):
            from csts_pipeline.pipeline.ray_batches import run_batches

            yield from run_batches(self, stage, batches, pending, staging)
            return
        ray = self.ray
        options = self.actor_options(stage)
        size = self.pool_size(options, len(pending))
        log.info("%s: %d units on %d Ray actors (%s each)", stage.name, len(pending), size, options)
        worker = ray.remote(StageWorker).options(**options, **forwarded())
        stage_ref = ray.put(stage)
        actors = [worker.remote(stage_ref) for _ in range(size)]
        self.actors_used = size
        try:
            yield from self._stream(actors, pending, str(staging))
        finally:
            for actor in actors:
                ray.kill(actor)

    def _stream(self, actors: list[Any], pending: list[Unit], staging: str) -> Iterator[tuple[Unit, dict[str, Any]]]:
        """Keeps every actor busy and yields each unit's stats as soon as it is done, in any order."""
        ray = self.ray
        queue = list(reversed(pending))
        in_flight: dict[Any, tuple[Any, Unit]] = {}

        def submit(actor: Any) -> None:
            unit = queue.pop()
            in_flight[actor.process.remote(unit, staging)] = (actor, unit)

        for _ in range(IN_FLIGHT_PER_ACTOR):
            for actor in actors:
                if queue:
                    submit(actor)
        while in_flight:
            [ref], _ = ray.wait(list(in_flight), num_returns=1)
            actor, unit = in_flight.pop(ref)
            stats = self._result(ref)
            if queue:
                submit(actor)
            yield unit, stats

    def _result(self, ref: Any) -> dict[str, Any]:
        """A unit's stats; a UserError raised in an actor reaches the CLI as itself (one line, exit 2)."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, UserError):
                raise exc.cause from None
            raise


class RayTasks:
    """`ClusterStage.tasks` under Ray: `fn(shared, item)` as one Ray task per item, `shared` put once in the object
    store (each node maps one copy; NumPy arrays are read without a copy). Results come back in item order, with at
    most two tasks per fitting slot in flight so that the driver's memory holds a bounded number of results."""

    distributed = True

    def __init__(self, executor: RayExecutor):
        self.executor = executor

    def map(self, fn: Any, items: Any, shared: Any, resources: Resources) -> Iterator[Any]:
        from collections import deque

        self.executor.connect()
        ray = self.executor.ray
        options = self.executor.options(resources)
        widest = max(node["Resources"].get("CPU", 0) for node in ray.nodes() if node["Alive"])
        options["num_cpus"] = min(options["num_cpus"], widest)  # a task asking for more would never start
        remote = ray.remote(fn).options(**options)
        shared_ref = ray.put(shared)
        limit = 2 * self.executor.pool_size(options, pending=1 << 30)
        in_flight: deque = deque()
        for item in items:
            in_flight.append(remote.remote(shared_ref, item))
            if len(in_flight) >= limit:
                yield ray.get(in_flight.popleft())
        while in_flight:
            yield ray.get(in_flight.popleft())
