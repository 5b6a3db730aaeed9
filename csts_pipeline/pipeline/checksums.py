"""Content checksums of output files, computed from the bytes as they are written (no second read).

Sizes and row counts miss silent corruption: a flipped bit inside a Parquet page still reads, with other values.
So the one atomic writer (pipeline.shards.write_atomic) passes every byte through `HashingWriter` and leaves the
digest in a hidden sidecar beside the file (`.<name>.xxh3`), which survives a crash, a resume and a worker process;
the stage record then lists each file's digest next to its size (`describe_files`), and readers check a file
against it before trusting it (`verify_outputs`). XXH3-64 was chosen over BLAKE2b by bench/pipeline/checksums.py: it
hashes at memory speed, so writing with it costs under 1% (docs/performance.md). It guards against accidents (bit rot,
truncation, a stray edit), not against an attacker, who could rewrite the record too.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import xxhash

HASH_KEY = "xxh3_64"  # the record field of a file's digest
SIDECAR_SUFFIX = ".xxh3"
BLOCK = 1 << 20
_VERIFIED: set[tuple[str, int, int, str]] = set()  # (path, size, mtime_ns, digest) found whole


def new_hasher() -> Any:
    return xxhash.xxh3_64()


class HashingWriter:
    """A binary file handle that hashes what passes through `write`; enough of the file protocol for pyarrow's
    Parquet writer, numpy.save, json and matplotlib, which all write sequentially."""

    def __init__(self, handle: IO[bytes]):
        self.handle = handle
        self.hasher = new_hasher()
        self.position = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.hasher.update(view)
        self.position += len(view)
        return self.handle.write(view)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        self.handle.flush()

    def fileno(self) -> int:
        return self.handle.fileno()

    @property
    def closed(self) -> bool:
        return self.handle.closed

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    @property
    def name(self) -> str:
        return self.handle.name

    def hexdigest(self) -> str:
        return self.hasher.hexdigest()


def sidecar_of(path: Path) -> Path:
    return path.with_name(f".{path.name}{SIDECAR_SUFFIX}")


STAGED = (".next", ".pull")  # the hidden folders whose files a record will list: staging, and a pull's copy


def wants_sidecar(path: Path) -> bool:
    """A file that a record will list: inside a staging (or pull) folder, and not hidden or underscored itself
    (temporaries, records, markers). Other files (an export, a checkpoint saved alone) get no sidecar."""
    staged = any(part.startswith(".") and part.endswith(STAGED) for part in path.parent.parts)
    return staged and path.name[0] not in "._"


def drop_sidecars(folder: Path) -> None:
    """Once a folder is committed its record holds the digests: the sidecars have done their work."""
    for sidecar in folder.rglob(f".*{SIDECAR_SUFFIX}"):
        sidecar.unlink(missing_ok=True)


def write_sidecar(path: Path, digest: str, size: int) -> None:
    """Not synced and not atomic on purpose: a sidecar lost or torn by a crash is only recomputed by reading. The
    file's size and modification time go with the digest, so that a file changed since is never taken for it."""
    sidecar_of(path).write_text(f"{digest} {size} {path.stat().st_mtime_ns}\n")


def file_digest(path: Path) -> str:
    """The digest of a file as it is on disk (one read)."""
    hasher = new_hasher()
    with path.open("rb") as handle:
        while block := handle.read(BLOCK):
            hasher.update(block)
    return hasher.hexdigest()


def written_digest(path: Path) -> str:
    """The digest computed while `path` was written, from its sidecar when the sidecar matches the file's size;
    else (a file written by other code, such as a model's save_pretrained) by reading it."""
    try:
        digest, size, mtime = sidecar_of(path).read_text().split()
        stat = path.stat()
        if (int(size), int(mtime)) == (stat.st_size, stat.st_mtime_ns):
            return digest
    except (OSError, ValueError):
        pass
    return file_digest(path)


def verify_file(path: Path, entry: dict[str, Any]) -> str | None:
    """What is wrong with `path` against its record entry (missing, size, digest), None when whole; an entry
    without a digest (a record of an older version) is only size-checked."""
    if not path.is_file():
        return f"{path}: missing"
    size = path.stat().st_size
    if size != entry["bytes"]:
        return f"{path}: {size} bytes, the record says {entry['bytes']}"
    expected = entry.get(HASH_KEY)
    if not expected:
        return None
    key = (str(path.resolve()), size, path.stat().st_mtime_ns, expected)
    if key in _VERIFIED:  # read and found whole by this process, unchanged since: one read per file, not per reader
        return None
    if file_digest(path) != expected:
        return f"{path}: corrupt (content checksum differs from the record's)"
    _VERIFIED.add(key)
    return None


def verify_outputs(folder: Path, record: dict[str, Any]) -> tuple[list[str], int]:
    """(problems, files without a digest) over every file the record lists."""
    listed = record.get("output_files") or {}
    problems = [problem for name, entry in listed.items() if (problem := verify_file(folder / name, entry))]
    return problems, sum(not entry.get(HASH_KEY) for entry in listed.values())
