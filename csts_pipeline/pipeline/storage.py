"""Work folders and inputs on fsspec URLs (s3://, gs://, hf://, file://, memory://), with commits that stay atomic
where a rename is a copy (docs/storage.md).

The stages and the executor work on local paths, and keep doing so: a URL work_dir gets a local working cache
(`$CSTS_PIPELINE_CACHE/work/<name>-<hash>/`, by default under ~/.cache/csts-pipeline), whose `.remote.json` names
the URL. Before a stage runs, its upstream stage's committed output is pulled from the store into the cache (the
record and the files it lists, checked by size). After the local commit the stage is published: every output
file under a new generation folder `<url>/<stage>/gen-<time>-<id>/`, then the record `<url>/<stage>/_stage.json`,
naming that generation, in one put. The record is the commit: readers trust only the files it lists, so a crash
before it leaves the previous record and its generation whole, and the replaced generation is deleted only after
the new record is written. Inputs given as URLs (a caption file, an image folder, a manifest) are copied into the
cache once, and again when their size or modification time changes.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.checksums import HASH_KEY, drop_sidecars, written_digest
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.failpoints import failpoint
from csts_pipeline.pipeline.records import RECORD, output_problems, read_json, read_record, write_json
from csts_pipeline.pipeline.shards import write_atomic
from csts_pipeline.pipeline.urls import display, filesystem

log = logging.getLogger(__name__)
CACHE_ENV = "CSTS_PIPELINE_CACHE"
MARKER = ".remote.json"
GENERATION_PREFIX = "gen-"
ORPHAN_SECONDS = 24 * 3600  # an unreferenced generation older than this is a crashed publish's, never a live one's


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "csts-pipeline").expanduser().absolute()


def _slug(url: str) -> str:
    """A folder name per URL: readable tail, and a hash so that two URLs never share a folder."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", url.split("://", 1)[1].rstrip("/").rsplit("/", 1)[-1])[:40]
    return f"{tail or 'root'}-{digest}"


def mirror_folder(url: str) -> Path:
    """The local working cache of a URL work_dir. Its marker names the URL, so whatever holds the folder (the
    executor, `status`) knows where the stages commit."""
    url = url.rstrip("/")
    filesystem(url)  # a bad URL or a missing driver fails here, when the manifest is loaded
    folder = cache_root() / "work" / _slug(url)
    if remote_of(folder) != url:
        write_json(folder / MARKER, {"url": url})
    return folder


def output_cache(url: str) -> Path:
    """The local folder of an output given as a URL (`train --out memory://runs/a`): `a` in the working cache of
    its parent URL, from where it is published (pipeline.commit)."""
    parent, _, name = url.rstrip("/").rpartition("/")
    if "://" not in parent or not name:
        raise UserError(f"{url}: name a folder under a store URL, e.g. s3://bucket/runs/train-1")
    return mirror_folder(parent) / name


def remote_of(work_dir: Path) -> str | None:
    """The URL a work folder mirrors, or None for an ordinary local work folder."""
    marker = work_dir / MARKER
    return read_json(marker).get("url") if marker.is_file() else None


# --- inputs -------------------------------------------------------------------------------------------------------


def input_copy(url: str, is_file: bool) -> Path:
    """Where a URL input is copied: a file keeps its name (readers look at suffixes), a folder its layout."""
    folder = cache_root() / "inputs" / _slug(url.rstrip("/"))
    return folder / url.rstrip("/").rsplit("/", 1)[-1] if is_file else folder


def fetch(url: str, target: Path) -> Path:
    """Copy a URL file to `target`, or every file under a URL folder into `target`; copies whose size and time
    match the store's are kept. The copy keeps the store's modification time, so embed's input fingerprint
    (names, sizes, times) is the same on every machine."""
    fs, path = filesystem(url)
    if fs.isfile(path):
        listing = {target: (path, fs.info(path))}
    elif fs.isdir(path):
        found = fs.find(path, detail=True)
        listing = {target / name[len(path) :].lstrip("/"): (name, info) for name, info in found.items()}
    else:
        raise UserError(f"{url}: not found")
    for dest, (source, info) in listing.items():
        _download(fs, source, info, dest)
    return target


def _download(fs: Any, source: str, info: dict[str, Any], dest: Path) -> None:
    mtime = _mtime(info)
    same_size = dest.is_file() and dest.stat().st_size == info.get("size")
    if same_size and (mtime is None or int(dest.stat().st_mtime) == int(mtime)):
        return
    _copy_in(fs, source, dest)
    if mtime is not None:
        os.utime(dest, (mtime, mtime))


def _copy_in(fs: Any, source: str, dest: Path) -> None:
    """One store object into a local file, through the one atomic writer."""
    with fs.open(source, "rb") as remote:
        write_atomic(dest, lambda handle: shutil.copyfileobj(remote, handle, 1 << 20))


def _mtime(info: dict[str, Any]) -> float | None:
    """The modification time in a store's listing (each driver names it differently), as seconds."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(key)
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, datetime.datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


# --- stage outputs on the store -----------------------------------------------------------------------------------


def remote_record(url: str, name: str) -> dict[str, Any] | None:
    """The committed record of stage `name` under `url`, or None; a corrupt one is an error naming it."""
    fs, root = filesystem(url)
    path = f"{root}/{name}/{RECORD}"
    try:
        blob = fs.cat_file(path)
    except FileNotFoundError:
        return None
    try:
        record = json.loads(blob)
    except (ValueError, UnicodeDecodeError):
        record = None
    if not isinstance(record, dict):
        raise UserError(f"{display(fs, path)}: corrupt stage record; rerun the stage with --force")
    return record


def _files_base(root: str, name: str, record: dict[str, Any]) -> str:
    """Where a record's files are: its generation folder (a record copied from a local folder has none)."""
    generation = record.get("generation")
    return f"{root}/{name}/{generation}" if generation else f"{root}/{name}"


def remote_problems(url: str, name: str, record: dict[str, Any]) -> list[str]:
    """What differs between the files a remote record lists and the store: missing or truncated files."""
    fs, root = filesystem(url)
    listed = record.get("output_files")
    if listed is None:
        return [f"{url}/{name}/{RECORD}: lists no output files; rerun with --force"]
    base = _files_base(root, name, record)
    found = fs.find(base, detail=True) if fs.exists(base) else {}
    sizes = {path[len(base) :].lstrip("/"): info.get("size") for path, info in found.items()}
    problems = []
    for relative, entry in listed.items():
        where = display(fs, f"{base}/{relative}")
        if relative not in sizes:
            problems.append(f"{where}: missing")
        elif sizes[relative] != entry["bytes"]:
            problems.append(f"{where}: {sizes[relative]} bytes, the record says {entry['bytes']}")
    return problems


def current(url: str, name: str, key: str) -> dict[str, Any] | None:
    """The store's record of `name` when it has fingerprint `key` and every listed file is whole, else None."""
    record = remote_record(url, name)
    if record is None or record.get("fingerprint") != key:
        return None
    problems = remote_problems(url, name, record)
    if problems:
        log.warning("%s: %s; recomputing", name, problems[0])
        return None
    return record


def _local_record(folder: Path) -> dict[str, Any] | None:
    try:
        return read_record(folder)
    except UserError:  # a corrupt cached record: the cache is replaced from the store
        return None


def pull_upstream(url: str, work_dir: Path, name: str, upstream: str | None) -> None:
    """What a stage's plan reads from the cache: its upstream stage whole, and the other stages' records."""
    if upstream is None:
        return
    fs, root = filesystem(url)
    names = [Path(path).name for path in fs.ls(root, detail=False)] if fs.isdir(root) else []
    for other in names:
        if other == upstream:
            pull(url, work_dir, other)
        elif other != name and not other.startswith((".", "_")):
            pull_record(url, work_dir, other)


def _in_cache(folder: Path, record: dict[str, Any], files: bool) -> bool:
    local = _local_record(folder)
    same = local is not None and all(local.get(k) == record.get(k) for k in ("fingerprint", "generation"))
    return same and not (files and local is not None and output_problems(folder, local))


def pull(url: str, work_dir: Path, name: str) -> None:
    """Make `<work_dir>/<name>` the store's committed output of `name` (record and listed files, sizes checked),
    unless the cache holds that generation whole. A stage the store lacks is left for plan() to report."""
    folder = work_dir / name
    publish_unpublished(url, folder, name)
    record = remote_record(url, name)
    if record is None or _in_cache(folder, record, files=True):
        return
    problems = remote_problems(url, name, record)
    if problems:
        raise UserError(f"{problems[0]}: the {name} output on the store is incomplete; rerun `csts-pipeline {name}`")
    clock = time.perf_counter()
    fs, root = filesystem(url)
    base = _files_base(root, name, record)
    incoming = work_dir / f".{name}.pull"
    shutil.rmtree(incoming, ignore_errors=True)
    for relative in record["output_files"]:
        _copy_in(fs, f"{base}/{relative}", incoming / relative)
    write_json(incoming / RECORD, record)
    problems = output_problems(incoming, record)
    if problems:
        raise UserError(f"{problems[0]}: the {name} output changed while it was read; run again")
    for relative, entry in record["output_files"].items():  # digests computed while copying: no second read
        if entry.get(HASH_KEY) and written_digest(incoming / relative) != entry[HASH_KEY]:
            raise UserError(
                f"{display(fs, f'{base}/{relative}')}: corrupt on the store (content checksum differs from its "
                f"record); rebuild it with `csts-pipeline {name} --force`"
            )
    shutil.rmtree(folder, ignore_errors=True)  # a crash here leaves no cached copy: the next run pulls again
    incoming.rename(folder)
    drop_sidecars(folder)
    seconds = time.perf_counter() - clock
    log.info("%s: pulled %d files in %.1fs from %s", name, len(record["output_files"]), seconds, display(fs, base))


def pull_record(url: str, work_dir: Path, name: str) -> None:
    """Only the record of a stage that is read for its record alone; the cached files it replaces go."""
    folder = work_dir / name
    publish_unpublished(url, folder, name)
    record = remote_record(url, name)
    if record is None or _in_cache(folder, record, files=False):
        return
    shutil.rmtree(folder, ignore_errors=True)
    write_json(folder / RECORD, record)


def publish_unpublished(url: str, folder: Path, name: str) -> bool:
    """A whole local commit that no publish finished (its record names no generation: a run crashed between its
    local commit and the store's record) is published now, before anything could replace the cache with the
    store's older output. True when it published."""
    local = _local_record(folder)
    if local is None or local.get("generation") or output_problems(folder, local):
        return False
    log.info("%s: publishing the output a crashed run committed in the cache", name)
    publish(url, folder, name, local)
    return True


def publish_current(url: str, folder: Path, name: str, key: str) -> bool:
    """True when the store holds output `key` of `name`: already, or now, because the cache held it committed
    (a run that died after its local commit and before or during its publish)."""
    if current(url, name, key) is not None:
        return True
    local = _local_record(folder)
    if local is None or local.get("fingerprint") != key or output_problems(folder, local):
        return False
    log.info("%s: publishing the output committed in the cache", name)
    publish(url, folder, name, {k: v for k, v in local.items() if k != "generation"})
    return True


def publish(url: str, folder: Path, name: str, record: dict[str, Any]) -> dict[str, Any]:
    """Upload the committed `folder` under a new generation, then its record in one put (the commit), then drop
    the generation it replaced. A crash before the record leaves the store's previous output whole."""
    clock = time.perf_counter()
    fs, root = filesystem(url)
    generation = f"{GENERATION_PREFIX}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    published = record | {"generation": generation}
    base = _files_base(root, name, published)
    for index, relative in enumerate(record["output_files"]):
        _mkdir_parent(fs, f"{base}/{relative}")
        fs.put_file(str(folder / relative), f"{base}/{relative}")
        if index == 0:
            failpoint(f"{name}:publish-after-first-file")
    problems = remote_problems(url, name, published)
    if problems:
        raise UserError(f"{problems[0]}: the upload did not arrive whole; run again")
    failpoint(f"{name}:publish-before-record")
    try:
        previous = remote_record(url, name)
    except UserError:
        previous = None
    _put(fs, f"{root}/{name}/{RECORD}", (json.dumps(published, indent=2, sort_keys=True, default=str) + "\n").encode())
    write_json(folder / RECORD, published)  # the cache now holds this generation
    failpoint(f"{name}:publish-before-cleanup")
    _collect(fs, f"{root}/{name}", generation, (previous or {}).get("generation"))
    size = sum(entry["bytes"] for entry in record["output_files"].values()) / 1e6
    seconds = time.perf_counter() - clock
    log.info(
        "%s: published %d files (%.1f MB) in %.1fs to %s",
        name,
        len(published["output_files"]),
        size,
        seconds,
        display(fs, base),
    )
    return published


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocol


def _mkdir_parent(fs: Any, path: str) -> None:
    """A local filesystem needs the folder; object stores have none to make."""
    if _is_local(fs):
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)


def _put(fs: Any, path: str, blob: bytes) -> None:
    """One whole object: a single PUT on an object store; on a local filesystem a write and a rename."""
    if not _is_local(fs):
        fs.pipe_file(path, blob)
        return
    tmp = f"{path.rsplit('/', 1)[0]}/.{RECORD}.{os.getpid()}.tmp"
    fs.pipe_file(tmp, blob)
    fs.mv(tmp, path)


def _collect(fs: Any, stage_path: str, keep: str, replaced: str | None) -> None:
    """Delete the generation the new record replaced, and generations no record named that a crashed publish
    left more than a day ago (a younger one may be a concurrent run's upload in progress)."""
    now = time.time()
    for path in fs.ls(stage_path, detail=False):
        generation = path.rstrip("/").rsplit("/", 1)[-1]
        if not generation.startswith(GENERATION_PREFIX) or generation == keep:
            continue
        if generation != replaced and now - _generation_time(generation) < ORPHAN_SECONDS:
            continue
        fs.rm(path, recursive=True)


def _generation_time(generation: str) -> float:
    try:
        stamp = generation.removeprefix(GENERATION_PREFIX).split("-", 1)[0]
        return datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%S").replace(tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return time.time()  # a name we did not write: never collected as an orphan
