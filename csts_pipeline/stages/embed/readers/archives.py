"""img2dataset-style corpora: WebDataset tar shards and Parquet files that hold the image bytes themselves.

Both readers return a `Corpus` whose `members` say where each image's bytes are (`Member`: a byte range of a tar
shard, or a row of a Parquet file), so the embed loader reads them without unpacking anything. Ids: the sample
key as `image_id` when every key is a number (img2dataset writes `000010023`), else the key's rank in sorted
order; `caption_id` is the rank of (image, caption number). A tar is read by the standard library as a stream
(no `webdataset` dependency); its member offsets make random access cheap later.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from csts_pipeline.pipeline.errors import UserError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")


@dataclass(frozen=True)
class Member:
    """Where one image's bytes live: `offset`/`size` in a tar, or `row` of `column` in a Parquet file."""

    path: str
    offset: int = 0
    size: int = 0
    row: int = -1
    column: str = ""

    def read(self) -> bytes:
        if self.row < 0:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                return handle.read(self.size)
        return _parquet_cell(self.path, self.row, self.column)


_ROW_GROUP_CACHE: dict[tuple[str, int, str], list] = {}


def _parquet_cell(path: str, row: int, column: str) -> bytes:
    """One image cell, through a one-row-group cache (loader workers read rows in order)."""
    file = pq.ParquetFile(path)
    group, start = 0, 0
    while start + file.metadata.row_group(group).num_rows <= row:
        start += file.metadata.row_group(group).num_rows
        group += 1
    key = (path, group, column)
    if key not in _ROW_GROUP_CACHE:
        _ROW_GROUP_CACHE.clear()
        _ROW_GROUP_CACHE[key] = file.read_row_group(group, columns=[column]).column(0).to_pylist()
    return _ROW_GROUP_CACHE[key][row - start]


def _caption_texts(suffix: str, data: bytes, ref: str) -> list[object]:
    """A `.txt` member is one caption; a `.json` one holds `caption` (a string or a list)."""
    if suffix == ".txt":
        return [data.decode("utf-8", errors="replace")]
    try:
        value = json.loads(data).get("caption")
    except (ValueError, AttributeError):
        raise UserError(f"{ref}: not a JSON object") from None
    return value if isinstance(value, list) else [value]


def scan_tar(path: Path) -> dict[str, dict]:
    """key -> {"image": Member, "captions": [...]} for one shard, reading the tar once as a stream."""
    samples: dict[str, dict] = {}
    _refuse_compressed(path)
    try:
        with tarfile.open(path, "r|") as tar:
            for info in tar:
                if not info.isfile():
                    continue
                key, dot, suffix = info.name.rpartition(".")
                suffix = dot + suffix.lower()
                sample = samples.setdefault(key, {"image": None, "name": None, "captions": []})
                if suffix in IMAGE_SUFFIXES:
                    sample["image"] = Member(str(path), info.offset_data, info.size)
                    sample["name"] = f"{path.name}/{info.name}"
                elif suffix in (".txt", ".json"):
                    data = tar.extractfile(info).read()
                    sample["captions"] += _caption_texts(suffix, data, f"{path.name}/{info.name}")
    except tarfile.TarError as exc:
        raise UserError(f"{path}: not a readable tar shard ({exc})") from None
    return samples


_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZ": "bzip2", b"\xfd7zXZ": "xz", b"\x28\xb5\x2f\xfd": "zstd"}


def _refuse_compressed(path: Path) -> None:
    """Members are read later by byte range, which a compressed tar does not have: say so instead of reading none."""
    with path.open("rb") as handle:
        head = handle.read(6)
    for magic, kind in _COMPRESSED.items():
        if head.startswith(magic):
            raise UserError(f"{path}: a {kind}-compressed tar; decompress it to a plain .tar shard first")


def read_webdataset(folder: Path) -> tuple[list[tuple[str, str, Member, list]], list[str]]:
    """(key, display name, member, captions) of every sample with an image, in key order; and the keys without."""
    shards = sorted(folder.glob("*.tar"))
    if not shards:
        packed = sorted(folder.glob("*.tar.*")) + sorted(folder.glob("*.tgz"))
        hint = f" ({packed[0].name} is compressed: decompress it to a plain .tar)" if packed else ""
        raise UserError(f"{folder}: no .tar shards found{hint}")
    rows, no_image = [], []
    for shard in shards:
        for key, sample in scan_tar(shard).items():
            if sample["image"] is None:
                no_image.append(f"{shard.name}/{key}")
            else:
                rows.append((key, sample["name"], sample["image"], sample["captions"]))
    return sorted(rows, key=lambda row: row[0]), no_image


def read_parquet_images(
    folder: Path, image_column: str, caption_columns: list[str], key_column: str | None
) -> list[tuple[str, str, Member, list]]:
    """(key, display name, member, captions) of every row of the folder's Parquet files (or of one file)."""
    files = [folder] if folder.is_file() else sorted(folder.glob("*.parquet"))
    if not files:
        raise UserError(f"{folder}: no .parquet files found")
    rows = []
    for path in files:
        schema = _parquet_schema(path)
        wanted = [image_column, *caption_columns] + ([key_column] if key_column else [])
        missing = [name for name in wanted if name not in schema.names]
        if missing:
            raise UserError(f"{path}: no column(s) {', '.join(missing)} (found: {', '.join(schema.names)})")
        kind = schema.field(image_column).type
        if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            raise UserError(f"{path}: image column {image_column!r} holds {kind}, not image bytes (binary)")
        table = _parquet_read(path, caption_columns + ([key_column] if key_column else []))
        keys = table.column(key_column).to_pylist() if key_column else None
        texts = [table.column(name).to_pylist() for name in caption_columns]
        for row in range(table.num_rows):
            key = str(keys[row]) if keys else f"{path.stem}#{row}"
            member = Member(str(path), row=row, column=image_column)
            rows.append((key, f"{path.name}#{row}", member, [column[row] for column in texts]))
    return sorted(rows, key=lambda row: row[0])


def _parquet_schema(path: Path) -> pa.Schema:
    try:
        return pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise UserError(f"{path}: not a readable Parquet file ({exc})") from None


def _parquet_read(path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise UserError(f"{path}: not a readable Parquet file ({exc})") from None


def embedding_array(path: Path, dim: int | None = None) -> np.ndarray:
    """A clip-retrieval `.npy` memory-mapped, checked to be a 2-D float array (of width `dim` when given)."""
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable .npy array ({str(exc).splitlines()[0]})") from None
    if array.ndim != 2 or array.dtype.kind != "f" or array.shape[1] == 0:
        raise UserError(f"{path}: shape {array.shape} {array.dtype}; expected (rows, dim) float embeddings")
    if dim is not None and array.shape[1] != dim:
        raise UserError(f"{path}: {array.shape[1]} columns, but the first .npy file has {dim}")
    return array


def _numbered(folder: Path, pattern: str) -> list[Path]:
    """Files like `img_emb_10.npy` in numeric order (clip-retrieval numbers its parts)."""
    digits = [(int("".join(ch for ch in path.stem if ch.isdigit()) or 0), path) for path in folder.glob(pattern)]
    return [path for _, path in sorted(digits)]


def read_clip_retrieval(
    folder: Path, caption_columns: list[str], key_column: str | None
) -> list[tuple[str, str, Member, list]]:
    """clip-retrieval's output: `img_emb/img_emb_N.npy` and `metadata/metadata_N.parquet`, row i of one the
    embedding of row i of the other. Members point at an embedding row, which replaces the image."""
    embeddings, metadata = _numbered(folder / "img_emb", "*.npy"), _numbered(folder / "metadata", "*.parquet")
    if not embeddings or len(embeddings) != len(metadata):
        raise UserError(f"{folder}: needs img_emb/*.npy and as many metadata/*.parquet files (clip-retrieval layout)")
    rows = []
    dim = None
    for npy, meta in zip(embeddings, metadata):
        array = embedding_array(npy, dim)
        count, dim = array.shape
        table = _parquet_read(meta)
        wanted = caption_columns + ([key_column] if key_column else [])
        missing = [name for name in wanted if name not in table.column_names]
        if missing:
            raise UserError(f"{meta}: no column(s) {', '.join(missing)} (found: {', '.join(table.column_names)})")
        if table.num_rows != count:
            raise UserError(f"{meta}: {table.num_rows} rows, but {npy.name} holds {count} embeddings")
        keys = table.column(key_column).to_pylist() if key_column else None
        texts = [table.column(name).to_pylist() for name in caption_columns]
        for row in range(count):
            key = str(keys[row]) if keys else f"{npy.stem}#{row:09d}"
            rows.append((key, f"{npy.name}#{row}", Member(str(npy), row=row, column="npy"), [t[row] for t in texts]))
    return sorted(rows, key=lambda row: row[0])
