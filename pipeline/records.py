"""Stage records: what makes a stage resumable, idempotent, inspectable and verifiable on read.

`_stage.json` records a stage's parameters, input fingerprints, counts, skips, package versions, timings and
every output file with its size (and row count for Parquet). It is written last: it is the commit point, and a
reader checks the listed files before trusting the folder (`require_record`). Every output is built in a hidden
staging folder beside its own, which two renames swap in once its record is written (`swap_in`; `recover_folder`
completes or undoes a swap a crash cut), so a failed run never touches the committed output. The executor
(pipeline.executor) does this for the data stages; `StageRun` for the single-folder steps (train, annotate).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import signal
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline.checksums import HASH_KEY, drop_sidecars, verify_outputs, written_digest
from pipeline.errors import UserError
from pipeline.shards import parquet_rows, remove_tmp_files, write_atomic

RECORD = "_stage.json"
STARTED = "_started.json"
FAILPOINT = "CSTS_PIPELINE_FAILPOINT"
_VERSIONED = (
    "csts-pipeline",
    "torch",
    "open_clip_torch",
    "faiss-cpu",
    "faiss-gpu-cu12",
    "sentence-transformers",
    "transformers",
    "numpy",
    "pyarrow",
    "numba",
)


def fingerprint(value: Any) -> str:
    """Stable hash of any JSON-able value."""
    blob = json.dumps(value, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def file_fingerprint(path: Path) -> str:
    """Content hash of a file (caption files are small enough to hash whole)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def write_json(path: Path, value: Any) -> None:
    """Atomic JSON write (pipeline.shards.write_atomic)."""
    blob = (json.dumps(value, indent=2, sort_keys=True, default=str) + "\n").encode()
    write_atomic(path, lambda handle: handle.write(blob))


def read_json(path: Path) -> Any:
    """A JSON file we wrote; unreadable content is a one-line error naming the file, never 'missing'."""
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: corrupt JSON ({exc}); delete it or rerun with --force") from None


def read_record(folder: Path) -> dict[str, Any] | None:
    """The stage record of `folder`, or None when there is none; a corrupt record is an error naming it."""
    path = folder / RECORD
    if not path.is_file():
        return None
    record = read_json(path)
    problem = record_shape_problem(record)
    if problem:
        raise UserError(f"{path}: corrupt stage record ({problem}); rerun the stage with --force")
    return record


def record_shape_problem(record: Any) -> str | None:
    """What makes `record` unusable as a stage record (the fields readers index), or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    for key in ("counts", "timings", "params", "inputs"):
        if key in record and not isinstance(record[key], dict):
            return f"'{key}' is not an object"
    seconds = record.get("timings", {}).get("seconds", 0)
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "'timings.seconds' is not a number"
    files = record.get("output_files", {})
    if not isinstance(files, dict):
        return "'output_files' is not an object"
    for name, entry in files.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int) or isinstance(entry["bytes"], bool):
            return f"output_files[{name!r}] has no integer 'bytes'"
    return None


def describe_files(folder: Path) -> dict[str, dict[str, int]]:
    """Every output file under `folder` (relative path -> bytes, and rows for Parquet), hidden names excluded."""
    files: dict[str, dict[str, int]] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if not path.is_file() or any(part[0] in "._" for part in relative.parts):
            continue
        entry = {"bytes": path.stat().st_size, HASH_KEY: written_digest(path)}
        if path.suffix == ".parquet":
            entry["rows"] = parquet_rows(path)
        files[relative.as_posix()] = entry
    return files


def output_problems(folder: Path, record: dict[str, Any]) -> list[str]:
    """What differs between the files a record lists and the folder: missing, truncated or extra shards."""
    listed = record.get("output_files")
    if listed is None:
        return [f"{folder / RECORD}: lists no output files (written by an older version); rerun with --force"]
    problems = []
    for name, entry in listed.items():
        path = folder / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != entry["bytes"]:
            problems.append(f"{path}: {path.stat().st_size} bytes, the record says {entry['bytes']}")
    for path in sorted(folder.rglob("*")):  # any stray file: `pyarrow.dataset` would read a stray .parquet too
        name = path.relative_to(folder).as_posix()
        if name not in listed and path.is_file() and not any(part[0] in "._" for part in Path(name).parts):
            problems.append(f"{path}: not listed in {RECORD}")
    return problems


def require_record(folder: Path, stage: str) -> dict[str, Any]:
    """The finished and complete record of an upstream stage, or a one-line error telling how to repair it."""
    record = read_record(folder)
    if record is None:
        raise UserError(f"{folder}: no finished {stage} output here; run `csts-pipeline {stage}` first")
    problems = output_problems(folder, record) or verify_outputs(folder, record)[0]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(
            f"{problems[0]}{more}: the {stage} output is incomplete or corrupt; "
            f"rebuild it with `csts-pipeline {stage} --force`"
        )
    return record


def failpoint(name: str) -> None:
    """Die here, as `kill -9` would, when the environment names this point: how tests reach the narrow windows
    of a commit that random kills rarely hit."""
    if os.environ.get(FAILPOINT) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def staging_of(folder: Path) -> Path:
    """Where the next output of `folder` is built: hidden beside it, on the same filesystem (renames are atomic)."""
    return folder.with_name(f".{folder.name}.next")


def previous_of(folder: Path) -> Path:
    """Where the committed output waits during a swap."""
    return folder.with_name(f".{folder.name}.old")


def swap_in(folder: Path, staging: Path, old: Path) -> None:
    """The committed staging folder replaces `folder`; between the two renames `recover_folder` can tell what to
    do."""
    if folder.exists():
        shutil.rmtree(old, ignore_errors=True)
        folder.rename(old)
        failpoint(f"{folder.name}:between-renames")
    staging.rename(folder)
    shutil.rmtree(old, ignore_errors=True)
    drop_sidecars(folder)


def recover_folder(folder: Path, staging: Path, old: Path) -> None:
    """Finish a commit that a crash cut short (its record is in the staging folder), or undo a half swap."""
    if (staging / RECORD).is_file():
        swap_in(folder, staging, old)
    elif old.exists() and not folder.exists():
        old.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


@dataclass
class StageRun:
    """One execution of a single-folder step into `folder`, identified by the fingerprint of `params` and
    `inputs`. The step writes into `staging` (kept across a crash for resuming) and `finish` swaps it in whole."""

    stage: str
    folder: Path
    params: dict[str, Any]
    inputs: dict[str, str]
    started: float = field(default_factory=time.time)

    @property
    def fingerprint(self) -> str:
        return fingerprint({"stage": self.stage, "params": self.params, "inputs": self.inputs})

    @property
    def staging(self) -> Path:
        return staging_of(self.folder)

    def recover(self) -> None:
        recover_folder(self.folder, self.staging, previous_of(self.folder))

    def is_done(self) -> bool:
        self.recover()
        record = read_record(self.folder)
        return record is not None and record.get("fingerprint") == self.fingerprint

    def begin(self, force: bool = False) -> bool:
        """Prepare the staging folder; True when an interrupted run with this fingerprint left work there."""
        self.recover()
        started = self.staging / STARTED
        resumable = False
        if started.is_file() and not force:
            try:
                resumable = json.loads(started.read_text()).get("fingerprint") == self.fingerprint
            except json.JSONDecodeError:
                resumable = False
        if not resumable and self.staging.exists():
            shutil.rmtree(self.staging)
        self.staging.mkdir(parents=True, exist_ok=True)
        remove_tmp_files(self.staging)
        write_json(started, {"fingerprint": self.fingerprint, "params": self.params, "inputs": self.inputs})
        return resumable

    def finish(self, counts: dict[str, Any], record_copy: str | None = None, **extra: Any) -> dict[str, Any]:
        """Write the record (and a visible copy named `record_copy`) into the staging folder, then swap it in."""
        record = self._record(counts, extra)
        (self.staging / STARTED).unlink(missing_ok=True)
        if record_copy is not None:
            write_json(self.staging / record_copy, record)  # all but output_files, which lists this copy
        record["output_files"] = describe_files(self.staging)
        write_json(self.staging / RECORD, record)
        swap_in(self.folder, self.staging, previous_of(self.folder))
        return record

    def record_in_place(self, counts: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """Record `folder` as it stands, without staging: for tests and benchmarks that fabricate a stage's
        output file by file (bench/scale.py's synthetic embed folder)."""
        record = self._record(counts, extra)
        record["output_files"] = describe_files(self.folder)
        write_json(self.folder / RECORD, record)
        return record

    def _record(self, counts: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
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
            },
            **extra,
        }
