"""The one way an output folder is replaced: `OutputFolder`, used by the executor's data stages, train, every
annotate step and the Hugging Face export.

An output is built in a hidden staging folder beside its own (`.<name>.next/`, same filesystem, so renames are
atomic), its record (`_stage.json`, listing every output file) is written last into the staging folder (the commit
point), and two renames swap it in. So a failed or killed run never touches the committed output, and `recover`
completes or undoes a swap that a crash cut. Two runs on one folder serialise on its lock (pipeline.locks); the
folders it reads are locked shared. "Up to date" means the same fingerprint (stage, params, inputs) and whole
files (`output_problems`). An output inside a URL work_dir's working cache (pipeline.storage) is published to the
store after its local commit, and checked against the store's record.

    out = OutputFolder("annotate-split", annotate_dir / "csts", params, inputs, reads=(ratings_dir,))
    with out:                                   # lock, recover a cut swap
        if out.up_to_date() and not force:
            return out.unchanged()
        out.begin(force)                        # empty staging folder (or a resumable one: True)
        write_parquet(table, out.staging / "train.parquet")
        return out.finish(counts, labels=...)   # record, failpoints, swap, publish
"""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline import storage
from csts_pipeline.pipeline.checksums import drop_sidecars
from csts_pipeline.pipeline.failpoints import failpoint
from csts_pipeline.pipeline.locks import stage_lock
from csts_pipeline.pipeline.records import (
    RECORD,
    STARTED,
    describe_files,
    fingerprint,
    output_problems,
    read_json,
    read_record,
    sealed,
    versions,
    write_json,
)
from csts_pipeline.pipeline.shards import remove_tmp_files

log = logging.getLogger(__name__)
UNITS = "_units"  # the executor's per-unit completion markers, inside a staging folder
UNWRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM}  # a lock file these forbid is not needed to read
IN_PLACE = "recorded_in_place"  # the record field of an output made file by file outside a stage (record_in_place)


def staging_of(folder: Path) -> Path:
    """Where the next output of `folder` is built: hidden beside it, on the same filesystem."""
    return folder.with_name(f".{folder.name}.next")


def previous_of(folder: Path) -> Path:
    """Where the committed output waits during a swap."""
    return folder.with_name(f".{folder.name}.old")


def store_of(folder: Path) -> tuple[str, str] | None:
    """(URL, name on the store) when `folder` lies in a URL work_dir's working cache, else None."""
    for parent in folder.parents:
        url = storage.remote_of(parent)
        if url is not None:
            return url, folder.relative_to(parent).as_posix()
    return None


@dataclass
class OutputFolder:
    """One output folder of step `stage`, identified by the fingerprint of `params` and `inputs`; `reads` are the
    folders it reads (locked shared while it is written). With `keep_others`, entries of the old folder that the
    new output lacks are kept (an export into a checkout keeps its `.git`)."""

    stage: str
    folder: Path
    params: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    reads: tuple[Path, ...] = ()
    keep_others: bool = False
    started: float = field(default_factory=time.time)
    _locks: contextlib.ExitStack | None = field(default=None, repr=False)
    unlocked: OSError | None = field(default=None, repr=False)  # why this folder's lock could not be taken

    @property
    def fingerprint(self) -> str:
        return fingerprint({"stage": self.stage, "params": self.params, "inputs": self.inputs})

    @property
    def staging(self) -> Path:
        return staging_of(self.folder)

    @property
    def previous(self) -> Path:
        return previous_of(self.folder)

    @property
    def store(self) -> tuple[str, str] | None:
        return store_of(self.folder)

    # --- lock ---------------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[OutputFolder]:
        """Hold the folders read (shared, first) and this one (exclusive); finish a swap a crash cut. A lock that a
        read-only or forbidden folder cannot hold is not taken: what is only read needs none, and so does an
        output found up to date; writing this one then fails at `begin` (`writable`), naming its lock file."""
        with contextlib.ExitStack() as stack:
            for read in self.reads:
                self._try_lock(stack, read, exclusive=False)
            self.unlocked = self._try_lock(stack, self.folder, exclusive=True)
            if self.unlocked is None:
                self.recover()
            self.started = time.time()
            yield self

    @staticmethod
    def _try_lock(stack: contextlib.ExitStack, folder: Path, exclusive: bool) -> OSError | None:
        """Take the lock of `folder`; the OSError when the folder cannot hold one (read-only, no permission)."""
        try:
            stack.enter_context(stage_lock(folder.parent, folder.name, exclusive=exclusive))
        except OSError as exc:
            if exc.errno not in UNWRITABLE:
                raise
            log.debug("%s: no lock (%s)", folder, exc)
            return exc
        return None

    def writable(self) -> None:
        """Raise the reason this output cannot be written (its lock could not be made), before any work."""
        if self.unlocked is not None:
            raise self.unlocked

    def __enter__(self) -> OutputFolder:
        self._locks = contextlib.ExitStack()
        return self._locks.enter_context(self.locked())

    def __exit__(self, *exc: object) -> None:
        locks, self._locks = self._locks, None
        if locks is not None:
            locks.close()

    # --- read ---------------------------------------------------------------------------------------------------

    def record(self) -> dict[str, Any] | None:
        """The committed record, or None."""
        return read_record(self.folder)

    def up_to_date(self) -> bool:
        """The committed output has this fingerprint and is whole (in the folder, or on the store for a URL
        work_dir); an unfinished run of the same output is then of no use and goes."""
        store = self.store
        if store is not None:
            current = storage.publish_current(store[0], self.folder, store[1], self.fingerprint)
            if current:  # the record (train's metrics, what the CLI reports) is read from the cache
                storage.pull_record(store[0], self.folder.parents[store[1].count("/")], store[1])
        else:
            current = self._whole_here()
        if current:
            self._drop_same_staging()
        return current

    def unchanged(self) -> dict[str, Any]:
        """What a step returns when it had nothing to do."""
        store = self.store
        where = f"{store[0]}/{store[1]}" if store else str(self.folder)
        return {"status": "up-to-date", "folder": where}

    def _whole_here(self) -> bool:
        try:
            record = self.record()
        except Exception as exc:  # a corrupt record of our own output: it is about to be replaced
            log.warning("%s", exc)
            return False
        if record is None or record.get("fingerprint") != self.fingerprint:
            return False
        problems = output_problems(self.folder, record)
        if problems:
            log.warning("%s: %s; recomputing", self.stage, problems[0])
        return not problems

    def _drop_same_staging(self) -> None:
        """An unfinished run of what is committed goes; one of other parameters stays (it may be resumed)."""
        try:
            same = read_json(self.staging / STARTED).get("fingerprint") == self.fingerprint
        except Exception:
            same = True
        if same:
            shutil.rmtree(self.staging, ignore_errors=True)

    # --- write --------------------------------------------------------------------------------------------------

    def begin(self, force: bool = False) -> bool:
        """Prepare the staging folder; True when an interrupted run with this fingerprint left work there to
        resume (never with `force`), else it starts empty."""
        self.writable()
        started = self.staging / STARTED
        resumable = False
        if started.is_file() and not force:
            try:
                resumable = read_json(started).get("fingerprint") == self.fingerprint
            except Exception:
                resumable = False
        if not resumable and self.staging.exists():
            shutil.rmtree(self.staging)
        self.staging.mkdir(parents=True, exist_ok=True)
        remove_tmp_files(self.staging)
        (self.staging / RECORD).unlink(missing_ok=True)
        write_json(started, {"fingerprint": self.fingerprint, "params": self.params, "inputs": self.inputs})
        return resumable

    def finish(
        self,
        counts: dict[str, Any],
        record_copy: str | None = None,
        timings: dict[str, float] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Commit: the record (and a visible copy named `record_copy`) last into the staging folder, the swap,
        then the publish to the store of a URL work_dir. Returns the record."""
        record = self._record(counts, timings or {}, extra)
        remove_tmp_files(self.staging)
        if record_copy is not None:
            write_json(self.staging / record_copy, record)  # all but output_files, which lists this copy
        record["output_files"] = describe_files(self.staging)  # hidden names (markers, _started.json) are not
        record = sealed(record)
        failpoint(f"{self.stage}:before-record")
        write_json(self.staging / RECORD, record)
        failpoint(f"{self.stage}:before-swap")
        self._swap()
        store = self.store
        if store is not None:
            record = storage.publish(store[0], self.folder, store[1], record)
        return record

    def record_in_place(self, counts: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """Record `folder` as it stands, without staging: for tests and benchmarks that fabricate a stage's
        output file by file (bench/mine/scale.py's synthetic embed folder)."""
        record = self._record(counts, {}, extra | {IN_PLACE: True})  # no plan made it: nothing to check it against
        record["output_files"] = describe_files(self.folder)
        record = sealed(record)
        write_json(self.folder / RECORD, record)
        return record

    def _record(self, counts: dict[str, Any], timings: dict[str, float], extra: dict[str, Any]) -> dict[str, Any]:
        finished = time.time()
        return {
            "stage": self.stage,
            "status": "done",
            "fingerprint": self.fingerprint,
            "params": self.params,
            "inputs": self.inputs,
            "counts": counts,
            "versions": versions(),
            "timings": {
                "started": self.started,
                "finished": finished,
                "seconds": round(finished - self.started, 3),
                **{name: round(value, 3) for name, value in timings.items()},
            },
            **extra,
        }

    # --- swap ---------------------------------------------------------------------------------------------------

    def _swap(self) -> None:
        """The committed staging folder replaces `folder`; between the two renames `recover` can tell what to do."""
        if self.folder.exists():
            shutil.rmtree(self.previous, ignore_errors=True)
            self.folder.rename(self.previous)
            failpoint(f"{self.stage}:between-renames")
        self.staging.rename(self.folder)
        self._settle()

    def recover(self) -> None:
        """Finish a commit that a crash cut short (its record is in the staging folder), or undo a half swap."""
        if (self.staging / RECORD).is_file():
            self._swap()
            return
        if self.previous.exists() and not self.folder.exists():
            self.previous.rename(self.folder)
        self._settle()

    def _settle(self) -> None:
        """After a swap: what the new output lacks comes over from the old one (with `keep_others`), the old one
        goes, and so does the run state (completion markers, the started marker) carried in with the swap."""
        if self.keep_others and self.previous.is_dir() and self.folder.is_dir():
            old = read_record(self.previous) or {}
            owned = {name.split("/", 1)[0] for name in old.get("output_files", {})} | {RECORD}
            for entry in self.previous.iterdir():
                if entry.name not in owned and not (self.folder / entry.name).exists():
                    entry.rename(self.folder / entry.name)
        shutil.rmtree(self.previous, ignore_errors=True)
        shutil.rmtree(self.folder / UNITS, ignore_errors=True)
        (self.folder / STARTED).unlink(missing_ok=True)
        drop_sidecars(self.folder)  # the digests are in the record now
