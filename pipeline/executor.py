"""The local executor: runs a stage's units in order and commits the stage's output whole.

A run never writes into the committed output. It works in a hidden staging folder beside it
(`<work_dir>/.<stage>.next/`), where each finished unit leaves a completion marker (`_units/`). A crashed or
failed run leaves the committed output untouched and its staging folder resumable: the next run with the same
fingerprint skips the finished units. On success the record, listing every output file, is written last into
the staging folder, and the staging folder is swapped in by two renames; `recover` completes or rolls back a
swap that a crash interrupted. Progress bars and logging live here, not in the stages.

A work_dir given as a URL runs in its local working cache (pipeline.storage): the upstream stage is pulled from
the store first, and the committed stage is published to the store after its local commit; the store's record is
then what "up to date" is checked against.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pipeline import storage
from pipeline.errors import UserError
from pipeline.locks import stage_lock
from pipeline.records import (
    RECORD,
    STARTED,
    describe_files,
    fingerprint,
    output_problems,
    previous_of,
    read_json,
    read_record,
    recover_folder,
    staging_of,
    swap_in,
    versions,
    write_json,
)
from pipeline.records import failpoint as _failpoint
from pipeline.shards import remove_tmp_files
from pipeline.stage import Stage, StagePlan, Unit

log = logging.getLogger(__name__)
UNITS = "_units"


def staging_folder(stage: Stage) -> Path:
    return staging_of(stage.folder)


def previous_folder(stage: Stage) -> Path:
    return previous_of(stage.folder)


def plan_fingerprint(stage: Stage, plan: StagePlan) -> str:
    return fingerprint({"stage": stage.name, "params": plan.params, "inputs": plan.inputs})


def recover(stage: Stage) -> None:
    """Finish a commit that a crash cut short, or undo a half swap (pipeline.records.recover_folder)."""
    recover_folder(stage.folder, staging_folder(stage), previous_folder(stage))
    _drop_run_state(stage.folder)


def _drop_run_state(folder: Path) -> None:
    """Completion markers and the started marker are of no use once their run is committed."""
    shutil.rmtree(folder / UNITS, ignore_errors=True)
    (folder / STARTED).unlink(missing_ok=True)


def state(stage: Stage) -> tuple[str, dict[str, Any] | None, str]:
    """(state, record, detail): done, stale, incomplete, missing or partial; takes no lock on a local work_dir (on a
    URL one, the upstream stage is pulled into the cache first, since plan reads it)."""
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
        current = plan_fingerprint(stage, stage.plan()) == record.get("fingerprint")
    except Exception as exc:  # an upstream that is missing or incomplete makes this output stale
        return "stale", record, str(exc)
    return ("done" if current else "stale"), record, ""


def _pull(stage: Stage, remote: str) -> None:
    """The upstream stage's committed output from the store into the cache, under the upstream's lock."""
    if stage.upstream is not None:
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
        if stage.upstream is None:
            with stage_lock(stage.work_dir, stage.name):
                return self._run_locked(stage, force)
        with stage_lock(stage.work_dir, stage.upstream, exclusive=False), stage_lock(stage.work_dir, stage.name):
            return self._run_locked(stage, force)

    def _run_locked(self, stage: Stage, force: bool) -> dict[str, Any]:
        started = time.time()
        plan = stage.plan()
        key = plan_fingerprint(stage, plan)
        recover(stage)
        remote = storage.remote_of(stage.work_dir)
        if not force and self._up_to_date(stage, key, remote):
            self._drop_staging_of(stage, key)
            return {"status": "up-to-date", "folder": f"{remote}/{stage.name}" if remote else str(stage.folder)}
        clock = time.perf_counter()
        stage.setup()
        timings = {"setup": time.perf_counter() - clock}
        staging = staging_folder(stage)
        resumed = self._open_staging(staging, key, plan, force)
        clock = time.perf_counter()
        units = stage.prepare(staging, plan)
        timings["prepare"] = time.perf_counter() - clock
        markers = {unit.key: self._marker(staging, unit, key) for unit in units}
        pending = [unit for unit in units if markers[unit.key] is None]
        if resumed:
            log.info("%s: resuming, %d of %d units already done", stage.name, len(units) - len(pending), len(units))
        clock = time.perf_counter()
        with self._progress(stage, units, pending) as progress:
            for unit, stats in self._run_units(stage, pending, staging):
                markers[unit.key] = stats
                self._write_marker(staging, unit, key, stats)
                _failpoint(f"{stage.name}:after-unit")  # a kill in the middle of the work (tests)
                progress.update(unit.size)
        timings["process"] = time.perf_counter() - clock
        clock = time.perf_counter()
        result = stage.finish([markers[unit.key] for unit in units], staging)
        timings["finish"] = time.perf_counter() - clock
        extra = {"resumed": resumed, "units": len(units), "units_reused": len(units) - len(pending)}
        extra["executor"] = self.describe()
        record = self._record(stage, key, plan, result.counts, started, timings) | extra | result.extra
        self._commit(stage, staging, record)
        if remote is not None:
            record = storage.publish(remote, stage.folder, stage.name, record)
        return record

    @staticmethod
    def _up_to_date(stage: Stage, key: str, remote: str | None = None) -> bool:
        """The committed output has fingerprint `key` and is whole: in the folder, or on the store for a URL."""
        if remote is not None:
            return storage.publish_current(remote, stage.folder, stage.name, key)
        try:
            record = read_record(stage.folder)
        except Exception as exc:  # a corrupt record of our own output: it is about to be replaced
            log.warning("%s", exc)
            return False
        if record is None or record.get("fingerprint") != key:
            return False
        problems = output_problems(stage.folder, record)
        if problems:
            log.warning("%s: %s; recomputing", stage.name, problems[0])
        return not problems

    @staticmethod
    def _drop_staging_of(stage: Stage, key: str) -> None:
        """An unfinished run of what is already committed is of no further use; one of other parameters stays."""
        started = staging_folder(stage) / STARTED
        try:
            same = not started.is_file() or read_json(started).get("fingerprint") == key
        except Exception:
            same = True
        if same:
            shutil.rmtree(staging_folder(stage), ignore_errors=True)

    @staticmethod
    def _open_staging(staging: Path, key: str, plan: StagePlan, force: bool) -> bool:
        """True when the staging folder holds a resumable run with this fingerprint; else it starts empty."""
        started = staging / STARTED
        resumable = False
        if started.is_file() and not force:
            try:
                resumable = read_json(started).get("fingerprint") == key
            except Exception:
                resumable = False
        if not resumable and staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True, exist_ok=True)
        remove_tmp_files(staging)
        (staging / RECORD).unlink(missing_ok=True)
        write_json(started, {"fingerprint": key, "params": plan.params, "inputs": plan.inputs})
        return resumable

    @staticmethod
    def _marker_path(staging: Path, unit: Unit) -> Path:
        return staging / UNITS / (unit.key.replace("/", "__") + ".json")

    @classmethod
    def _write_marker(cls, staging: Path, unit: Unit, key: str, stats: dict[str, Any]) -> None:
        """The unit is done: a later run with this fingerprint skips it and reuses its stats."""
        write_json(cls._marker_path(staging, unit), {"fingerprint": _unit_fingerprint(key, unit), "stats": stats})

    def _marker(self, staging: Path, unit: Unit, key: str) -> dict[str, Any] | None:
        """The stats of a unit finished by an earlier run with this fingerprint, else None."""
        path = self._marker_path(staging, unit)
        if not path.is_file():
            return None
        try:
            marker = read_json(path)
        except Exception:
            return None
        return marker.get("stats") if marker.get("fingerprint") == _unit_fingerprint(key, unit) else None

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

    @staticmethod
    def _record(stage: Stage, key: str, plan: StagePlan, counts: dict, started: float, timings: dict) -> dict[str, Any]:
        finished = time.time()
        return {
            "stage": stage.name,
            "status": "done",
            "fingerprint": key,
            "params": plan.params,
            "inputs": plan.inputs,
            "counts": counts,
            "versions": versions(),
            "resources": vars(stage.resources),
            "timings": {
                "started": started,
                "finished": finished,
                "seconds": round(finished - started, 3),
                **{name: round(value, 3) for name, value in timings.items()},
            },
        }

    @staticmethod
    def _commit(stage: Stage, staging: Path, record: dict[str, Any]) -> None:
        """Record last into the staging folder (the commit point), then swap it in by two renames."""
        remove_tmp_files(staging)
        record["output_files"] = describe_files(staging)  # hidden names (markers, _started.json) are not outputs
        _failpoint(f"{stage.name}:before-record")
        write_json(staging / RECORD, record)
        _failpoint(f"{stage.name}:before-swap")
        swap_in(stage.folder, staging, previous_folder(stage))
        _drop_run_state(stage.folder)


def _unit_fingerprint(stage_key: str, unit: Unit) -> str:
    return fingerprint({"stage": stage_key, "unit": unit.key, "payload": unit.payload})
