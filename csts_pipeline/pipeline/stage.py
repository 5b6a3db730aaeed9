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

What a stage offers a cluster executor (pickling without its per-worker state, fanning out work, a batch
pipeline) is pipeline.cluster.ClusterStage, a subclass: the base class knows nothing of clusters.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any


@dataclass(frozen=True, kw_only=True)
class StageSpec:
    """What the command line and the executor know of a data stage without loading it: its name, the stage whose
    output it reads (`above`, the upstream's own spec: each stage package declares its `SPEC` by importing its
    upstream's, so the dependency is an import a reader sees), what it reads, its help, and where its class is
    (`entry`, "module:Class", imported only when the stage runs: the stages pull in numba, torch and open_clip,
    which `--help` and `status` do without)."""

    name: str
    above: StageSpec | None
    inputs: tuple[str, ...]
    help: str
    entry: str
    summary: str | None = None  # "module:function" (record, manifest) -> lines the CLI prints after a run

    @property
    def upstream(self) -> str | None:
        """The upstream stage's name (its output folder under the work_dir)."""
        return None if self.above is None else self.above.name

    @property
    def command(self) -> str:
        """The command that (re)builds this stage's output."""
        return f"csts-pipeline {self.name}"

    def load(self) -> Any:
        """The stage's class (a Stage subclass whose `name` and `upstream` are these)."""
        module, _, name = self.entry.partition(":")
        return getattr(import_module(module), name)

    def summary_lines(self, record: dict[str, Any], manifest: Any) -> list[str]:
        """What this stage adds to the one-line summary of a run (a funnel, reader skips); nothing by default."""
        if self.summary is None:
            return []
        module, _, name = self.summary.partition(":")
        return list(getattr(import_module(module), name)(record, manifest))


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


class Stage:
    """Base class of the data stages; see the module docstring for the life of a run."""

    name: str = ""
    upstream: str | None = None
    resources: Resources = Resources()

    def __init__(self, work_dir: Path):
        self.work_dir = work_dir

    @property
    def folder(self) -> Path:
        return self.work_dir / self.name

    def plan(self) -> StagePlan:
        raise NotImplementedError

    def upstream_stage(self) -> Stage | None:
        """The upstream stage as the same manifest makes it, so that its committed output is checked against what
        the manifest asks of it (pipeline.executor.stale_reason); None where a stage knows no manifest."""
        return None

    def setup(self) -> None:
        """Load models, resolve devices: what can fail before the work starts."""

    def prepare(self, staging: Path, plan: StagePlan) -> list[Unit]:
        if plan.units is None:
            raise NotImplementedError(f"{self.name}: plan() gave no units, so prepare() must")
        return plan.units

    def process(self, unit: Unit, staging: Path) -> dict[str, Any]:
        raise NotImplementedError

    def unit_files(self, unit: Unit) -> list[str]:
        """The files (relative to the staging folder) that `process` writes for `unit`: its key by default. A
        resumed run reuses a finished unit only while these are there as it wrote them (pipeline.executor)."""
        return [unit.key]

    def process_many(self, units: list[Unit], staging: Path) -> Iterator[tuple[Unit, dict[str, Any]]]:
        for unit in units:
            yield unit, self.process(unit, staging)

    def finish(self, stats: list[dict[str, Any]], staging: Path) -> StageResult:
        raise NotImplementedError
