"""The local executor: runs a stage's units in order and commits the stage's output whole.

The commit is pipeline.commit.OutputFolder's, as for every other writer: the lock, the staging folder
(`<work_dir>/.<stage>.next/`), the record, the swap, the recovery of a cut swap and the publish to a URL store.
What the executor adds is units: each finished unit leaves a completion marker (`_units/`) in the staging folder,
so a crashed or failed run leaves its staging folder resumable and the next run with the same fingerprint skips
the finished units. Progress bars and logging live here, not in the stages.

A work_dir given as a URL runs in its local working cache (pipeline.storage): the upstream stage is pulled from
the store first; the output folder publishes the committed stage to the store and checks "up to date" there.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from csts_pipeline.pipeline import storage
from csts_pipeline.pipeline.checksums import HASH_KEY, written_digest
from csts_pipeline.pipeline.commit import IN_PLACE, UNITS, OutputFolder, staging_of
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.failpoints import failpoint
from csts_pipeline.pipeline.locks import stage_lock
from csts_pipeline.pipeline.records import (
    STARTED,
    fingerprint,
    output_problems,
    read_json,
    read_record,
    require_current,
    require_record,
    write_json,
)
from csts_pipeline.pipeline.stage import Stage, StagePlan, Unit

log = logging.getLogger(__name__)


def staging_folder(stage: Stage) -> Path:
    return staging_of(stage.folder)


def output_of(stage: Stage, plan: StagePlan | None = None) -> OutputFolder:
    """The stage's output folder, its upstream's locked shared while it is written."""
    reads = () if stage.upstream is None else (stage.work_dir / stage.upstream,)
    output = OutputFolder(stage.name, stage.folder, reads=reads)
    if plan is not None:
        output.params, output.inputs = plan.params, plan.inputs
    return output


def check_upstream(stage: Stage) -> None:
    """Before planning: the upstream output is there, whole, computed from the current output of its own upstream
    (its record names it; a record written before it did: the inputs named after a stage folder of this work_dir),
    and what the manifest in use asks of it (`stale_reason`); else one line naming the stage to rerun."""
    if stage.upstream is None:
        return
    folder = stage.work_dir / stage.upstream
    record = require_record(folder, stage.upstream)
    inputs = record.get("inputs", {})
    above = [record["upstream"]] if record.get("upstream") else [k for k in inputs if (stage.work_dir / k).is_dir()]
    require_current(folder, stage.upstream, {name: stage.work_dir / name for name in above})
    upstream = stage.upstream_stage()
    if upstream is not None:
        require_as_asked(upstream, record)


def require_as_asked(stage: Stage, record: dict[str, Any] | None = None) -> dict[str, Any]:
    """The committed output of `stage` (its record, read when not given) as the manifest in use makes it, else one
    line naming it and the command that rebuilds it: how a stage, and any other reader of a stage's output
    (annotate's export of the filter's pairs), refuses what `status` calls stale."""
    if record is None:
        record = require_record(stage.folder, stage.name)
    why = stale_reason(stage, record)
    if why:
        raise UserError(f"{stage.folder}: stale: {why}; rerun `csts-pipeline {stage.name}` first")
    return record


def stale_reason(stage: Stage, record: dict[str, Any]) -> str | None:
    """Why the committed output `record` of `stage` is not what the manifest in use makes, or None when it is: the
    one meaning of stale, for `status` (`state`) and for every stage that reads it (`check_upstream`). An upstream
    that is not current raises its own line (naming the stage to rerun first); a plan that differs (parameters, or
    the inputs' fingerprints) is the reason returned. A record made in place (tests, benchmarks) has no plan."""
    if record.get(IN_PLACE):
        return None
    check_upstream(stage)
    try:
        plan = stage.plan()
    except UserError as exc:
        return str(exc)
    if plan_fingerprint(stage, plan) == record.get("fingerprint"):
        return None
    made, asked = record.get("params", {}), json.loads(json.dumps(plan.params, default=str))  # as recorded
    changed = [f"{stage.name}.{k} {made.get(k)!r} -> {v!r}" for k, v in asked.items() if made.get(k) != v]
    changed += [f"{stage.name}.{k} {v!r} -> none" for k, v in made.items() if k not in asked]
    if changed:
        return f"made with other parameters than the manifest's ({', '.join(changed)})"
    made_from = record.get("inputs", {})
    inputs = [k for k, v in plan.inputs.items() if made_from.get(k) != v] or list(made_from)
    return f"its inputs changed since it was made ({', '.join(inputs)})"


def plan_fingerprint(stage: Stage, plan: StagePlan) -> str:
    return output_of(stage, plan).fingerprint


def state(stage: Stage) -> tuple[str, dict[str, Any] | None, str]:
    """(state, record, detail): done, stale, incomplete, missing or partial; takes no lock on a local work_dir (on a
    URL one, the upstream stages are pulled into the cache first, since plan reads them)."""
    remote = storage.remote_of(stage.work_dir)
    if remote is None:
        record = read_record(stage.folder)
    else:
        storage.publish_unpublished(remote, stage.folder, stage.name)  # a crashed run's commit is not lost
        record = storage.remote_record(remote, stage.name)
        try:
            _pull(stage, remote)
        except UserError as exc:  # the store's upstream output is incomplete: this output cannot be current
            return ("stale" if record else "missing"), record, str(exc)
    if record is None:
        partial = (staging_folder(stage) / STARTED).is_file()
        return ("partial" if partial else "missing"), None, "a run was interrupted; rerun to resume" if partial else ""
    if remote is None:
        problems = output_problems(stage.folder, record)
    else:
        problems = storage.remote_problems(remote, stage.name, record)
    if problems:
        return "incomplete", record, problems[0]
    try:
        why = stale_reason(stage, record)
    except Exception as exc:  # an upstream that is missing, incomplete or stale makes this output stale
        return "stale", record, str(exc)
    return ("stale", record, why) if why else ("done", record, "")


def _pull(stage: Stage, remote: str) -> None:
    """The upstream stages' committed outputs from the store into the cache, each under its own lock, from the
    top: checking an upstream against the manifest (`stale_reason`) plans it, and its plan reads its own upstream."""
    if stage.upstream is None:
        return
    above = stage.upstream_stage()
    if above is not None:
        _pull(above, remote)
    with stage_lock(stage.work_dir, stage.upstream):
        storage.pull_upstream(remote, stage.work_dir, stage.name, stage.upstream)


class LocalExecutor:
    """Runs every unit of a stage in this process, in order."""

    def __init__(self, progress: bool = True):
        self.progress = progress

    def run(self, stage: Stage, force: bool = False) -> dict[str, Any]:
        """The stage's record after this run, or {"status": "up-to-date", ...} when there was nothing to do."""
        remote = storage.remote_of(stage.work_dir)
        if remote is not None:
            _pull(stage, remote)
        output = output_of(stage)
        with output:
            check_upstream(stage)
            plan = stage.plan()
            output.params, output.inputs = plan.params, plan.inputs
            if not force and output.up_to_date():
                return output.unchanged()
            output.writable()  # before models load: a folder that cannot be written fails at once
            return self._run_locked(stage, plan, output, force)

    def _run_locked(self, stage: Stage, plan: StagePlan, output: OutputFolder, force: bool) -> dict[str, Any]:
        clock = time.perf_counter()
        stage.setup()
        timings = {"setup": time.perf_counter() - clock}
        staging = output.staging
        resumed = output.begin(force)
        clock = time.perf_counter()
        units = stage.prepare(staging, plan)
        timings["prepare"] = time.perf_counter() - clock
        key = output.fingerprint
        markers = {unit.key: self._marker(stage, staging, unit, key) for unit in units}
        pending = [unit for unit in units if markers[unit.key] is None]
        if resumed:
            log.info("%s: resuming, %d of %d units already done", stage.name, len(units) - len(pending), len(units))
        clock = time.perf_counter()
        with self._progress(stage, units, pending) as progress:
            for unit, stats in self._run_units(stage, pending, staging):
                markers[unit.key] = stats
                self._write_marker(stage, staging, unit, key, stats)
                failpoint(f"{stage.name}:after-unit")  # a kill in the middle of the work (tests)
                progress.update(unit.size)
        timings["process"] = time.perf_counter() - clock
        clock = time.perf_counter()
        finished = [marker for unit in units if (marker := markers[unit.key]) is not None]
        assert len(finished) == len(units), "every unit has run or was resumed"
        result = stage.finish(finished, staging)
        timings["finish"] = time.perf_counter() - clock
        extra: dict[str, Any] = {"resumed": resumed, "units": len(units), "units_reused": len(units) - len(pending)}
        extra |= {"executor": self.describe(), "resources": vars(stage.resources), "upstream": stage.upstream}
        return output.finish(result.counts, timings=timings, **(extra | result.extra))

    @staticmethod
    def _marker_path(staging: Path, unit: Unit) -> Path:
        return staging / UNITS / (unit.key.replace("/", "__") + ".json")

    @classmethod
    def _write_marker(cls, stage: Stage, staging: Path, unit: Unit, key: str, stats: dict[str, Any]) -> None:
        """The unit is done: a later run with this fingerprint skips it and reuses its stats, as long as the files it
        wrote are still there as written (their sizes and digests are in the marker)."""
        files = {}
        for name in stage.unit_files(unit):
            path = staging / name
            if path.is_file():
                files[name] = {"bytes": path.stat().st_size, HASH_KEY: written_digest(path)}
        marker = {"fingerprint": _unit_fingerprint(key, unit), "stats": stats, "files": files}
        write_json(cls._marker_path(staging, unit), marker)

    def _marker(self, stage: Stage, staging: Path, unit: Unit, key: str) -> dict[str, Any] | None:
        """The stats of a unit finished by an earlier run with this fingerprint whose files are whole, else None (the
        unit is done again: a shard that vanished or changed in the staging folder is never counted unseen)."""
        path = self._marker_path(staging, unit)
        if not path.is_file():
            return None
        try:
            marker = read_json(path)
        except Exception:
            return None
        if marker.get("fingerprint") != _unit_fingerprint(key, unit) or not isinstance(marker.get("files"), dict):
            return None
        for name, entry in marker["files"].items():
            problem = _unit_file_problem(staging / name, entry)
            if problem:
                log.info("%s: %s; doing unit %s again", stage.name, problem, unit.key)
                return None
        return marker.get("stats")

    def _progress(self, stage: Stage, units: list[Unit], pending: list[Unit]) -> tqdm:
        """One bar over the stage's items; units finished by an earlier run count as done."""
        total = sum(unit.size for unit in units)
        done = total - sum(unit.size for unit in pending)
        return tqdm(total=total, initial=done, desc=stage.name, dynamic_ncols=True, disable=not self.progress)

    def _run_units(self, stage: Stage, pending: list[Unit], staging: Path) -> Iterator[tuple[Unit, dict[str, Any]]]:
        """(unit, stats) as each pending unit's shard is written; the caller writes its completion marker. Other
        executors override this alone: everything around it (staging, markers, finish, commit) is shared."""
        yield from stage.process_many(pending, staging)

    def describe(self) -> dict[str, Any]:
        """How this executor ran the units, for the record."""
        return {"kind": "local"}


def _unit_file_problem(path: Path, entry: dict[str, Any]) -> str | None:
    """What makes a finished unit's file unusable (gone, another size, other bytes), None when it is as written. The
    digest comes from its sidecar while that matches the file (no read), else from reading it."""
    if not path.is_file():
        return f"{path}: missing"
    if path.stat().st_size != entry.get("bytes"):
        return f"{path}: {path.stat().st_size} bytes, the unit wrote {entry.get('bytes')}"
    if written_digest(path) != entry.get(HASH_KEY):
        return f"{path}: changed since the unit wrote it"
    return None


def _unit_fingerprint(stage_key: str, unit: Unit) -> str:
    return fingerprint({"stage": stage_key, "unit": unit.key, "payload": unit.payload})
