"""Stage records: what makes a stage resumable, idempotent and inspectable.

A stage writes into its own folder. On start it writes `_started.json` with the fingerprint of its parameters
and inputs; shards follow one by one; at the end `_stage.json` records parameters, input fingerprints, counts,
skips, package versions and timings. A rerun with the same fingerprint is a no-op; a rerun after a crash keeps
the finished shards; a rerun with other parameters or inputs starts the folder afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline.errors import UserError

RECORD = "_stage.json"
STARTED = "_started.json"
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
    """Atomic JSON write: temporary name, then rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def read_record(folder: Path) -> dict[str, Any] | None:
    path = folder / RECORD
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def require_record(folder: Path, stage: str) -> dict[str, Any]:
    """The finished record of an upstream stage, or a clear error telling which stage to run."""
    record = read_record(folder)
    if record is None:
        raise UserError(f"{folder}: no finished {stage} output here; run `csts-pipeline {stage}` first")
    return record


@dataclass
class StageRun:
    """One execution of a stage in `folder`, identified by the fingerprint of `params` and `inputs`."""

    stage: str
    folder: Path
    params: dict[str, Any]
    inputs: dict[str, str]
    started: float = field(default_factory=time.time)

    @property
    def fingerprint(self) -> str:
        return fingerprint({"stage": self.stage, "params": self.params, "inputs": self.inputs})

    def is_done(self) -> bool:
        record = read_record(self.folder)
        return record is not None and record.get("fingerprint") == self.fingerprint

    def begin(self, force: bool = False) -> bool:
        """Prepare the folder; True when finished shards of an interrupted run with this fingerprint remain."""
        started = self.folder / STARTED
        resumable = False
        if started.is_file() and not force:
            try:
                resumable = json.loads(started.read_text()).get("fingerprint") == self.fingerprint
            except json.JSONDecodeError:
                resumable = False
        if not resumable and self.folder.exists():
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        for tmp in self.folder.rglob("*.tmp"):
            tmp.unlink()
        (self.folder / RECORD).unlink(missing_ok=True)
        write_json(started, {"fingerprint": self.fingerprint, "params": self.params, "inputs": self.inputs})
        return resumable

    def finish(self, counts: dict[str, Any], **extra: Any) -> dict[str, Any]:
        finished = time.time()
        record = {
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
        write_json(self.folder / RECORD, record)
        (self.folder / STARTED).unlink(missing_ok=True)
        return record
