"""Stage records: what makes a stage resumable, idempotent, inspectable and verifiable on read.

`_stage.json` records a stage's parameters, input fingerprints, counts, skips, package versions, timings and
every output file with its size (and row count for Parquet). It is written last: it is the commit point, and a
reader checks the listed files before trusting the folder (`require_record`). How a record is committed with
its folder (staging, lock, swap, publish) is pipeline.commit.OutputFolder, the one writer of every output.
"""

from __future__ import annotations

import hashlib
import json
import platform
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from csts_pipeline.pipeline.checksums import HASH_KEY, new_hasher, verify_outputs, written_digest
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.shards import parquet_rows, write_atomic

RECORD = "_stage.json"
STARTED = "_started.json"
SEAL = "record_xxh3"  # the record's checksum of itself: counts and rows edited by hand show at `status --verify`
UNSEALED = (SEAL, "generation")  # the fields the seal leaves out: itself, and what a publish adds after the commit
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

    def write(handle: IO[bytes]) -> None:
        handle.write(blob)

    write_atomic(path, write)


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


def record_digest(record: dict[str, Any]) -> str:
    """XXH3-64 of the record as JSON (sorted keys, as written and read back), without the UNSEALED fields."""
    as_read = json.loads(json.dumps({k: v for k, v in record.items() if k not in UNSEALED}, default=str))
    hasher = new_hasher()
    hasher.update(json.dumps(as_read, sort_keys=True).encode())
    return hasher.hexdigest()


def sealed(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its own checksum (SEAL), as the commit writes it."""
    return record | {SEAL: record_digest(record)}


def record_problems(folder: Path, record: dict[str, Any]) -> list[str]:
    """What `status --verify` finds wrong with a record itself: edited since it was written (its seal differs), or
    a Parquet file's row count other than the record's (read from the file's footer). A record of an older
    version has no seal: its rows are still recounted."""
    path = folder / RECORD
    problems = []
    if SEAL in record and record[SEAL] != record_digest(record):
        problems.append(f"{path}: edited since it was written (its own checksum differs); rerun the stage with --force")
    for name, entry in (record.get("output_files") or {}).items():
        file = folder / name
        if "rows" in entry and file.suffix == ".parquet" and file.is_file():
            try:
                rows = parquet_rows(file)
            except Exception as exc:  # a damaged footer (its checksum names it too)
                problems.append(f"{file}: unreadable Parquet footer ({exc.__class__.__name__})")
                continue
            if rows != entry["rows"]:
                problems.append(f"{file}: {rows} rows, {path.name} says {entry['rows']}")
    return problems


def describe_files(folder: Path) -> dict[str, dict[str, int]]:
    """Every output file under `folder` (relative path -> bytes, and rows for Parquet), hidden names excluded."""
    files: dict[str, dict[str, int]] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if not path.is_file() or any(part[0] in "._" for part in relative.parts):
            continue
        entry: dict[str, Any] = {"bytes": path.stat().st_size, HASH_KEY: written_digest(path)}
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


def require_current(folder: Path, command: str, sources: dict[str, Path]) -> dict[str, Any]:
    """`require_record`, and the output was computed from the current output of each of `sources` (its input key
    -> that output's folder): an upstream rerun since then makes it stale, refused in one line naming the command
    that rebuilds it."""
    record = require_record(folder, command)
    for key, source in sources.items():
        made_from = record.get("inputs", {}).get(key)
        found = read_record(source)
        if made_from is not None and found is not None and made_from != found.get("fingerprint"):
            raise UserError(
                f"{folder}: stale: the {source.name} output it was computed from has changed since; "
                f"rerun `csts-pipeline {command}` first"
            )
    return record
