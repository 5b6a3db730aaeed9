"""Thumbnails (at most 256 px on a side) of the images the page shows, made once each with Pillow.

An image is found from its `file_name` in embed's embeddings table, the way the dataset reader named it
(stages/embed/readers/datasets.py, archives.py): a file under the image folder, a member of a WebDataset tar shard
(`shard.tar/key.jpg`, located by `scan_tar`) or a row of a Parquet image column (`file.parquet#row`, read through
`Member`). Only the tar shards that hold a shown image are scanned."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
from PIL import Image, UnidentifiedImageError

from csts_pipeline.pipeline.manifest import DataConfig
from csts_pipeline.pipeline.schemas import EMBEDDINGS
from csts_pipeline.stages.embed.readers.archives import Member, scan_tar
from csts_pipeline.stages.embed.readers.corpus import escapes_folder

log = logging.getLogger(__name__)
SIZE = 256


def file_names(embed_dir: Path, image_ids: Iterable[int]) -> dict[int, str]:
    """image_id -> file_name for the given ids only (a filtered scan of two columns)."""
    wanted = sorted(set(image_ids))
    if not wanted:
        return {}
    dataset = ds.dataset(embed_dir / EMBEDDINGS, format="parquet")
    table = dataset.to_table(columns=["image_id", "file_name"], filter=pc.field("image_id").isin(wanted))
    return dict(zip(table.column("image_id").to_pylist(), table.column("file_name").to_pylist()))


def image_sources(data: DataConfig, names: dict[int, str]) -> dict[int, Path | Member]:
    """Where each image's bytes are: a file path, or a `Member` of a tar shard or Parquet file."""
    found: dict[int, Path | Member] = {}
    if data.format == "clip-retrieval":  # embeddings only: there are no images to show
        return found
    if data.format == "webdataset":
        by_shard: dict[str, dict[str, int]] = {}
        for image_id, name in names.items():
            by_shard.setdefault(name.split("/", 1)[0], {})[name] = image_id
        for shard, wanted in by_shard.items():
            for sample in scan_tar(data.images / shard).values():
                if sample["name"] in wanted and sample["image"] is not None:
                    found[wanted[sample["name"]]] = sample["image"]
        return found
    if data.format == "parquet":
        for image_id, name in names.items():
            file, _, row = name.rpartition("#")
            path = data.images if data.images.is_file() else data.images / file
            found[image_id] = Member(str(path), row=int(row), column=data.image_column)
        return found
    return {image_id: data.images / name for image_id, name in names.items() if not escapes_folder(name)}


def make_thumbnail(source: Path | Member, out: Path) -> bool:
    """One JPEG at most SIZE px on its longer side; False (and a log line) when the image cannot be read."""
    try:
        opened = Image.open(source) if isinstance(source, Path) else Image.open(io.BytesIO(source.read()))
        with opened as image:
            image.draft("RGB", (SIZE, SIZE))  # JPEG: decode at a reduced scale, much faster for large photos
            image.thumbnail((SIZE, SIZE))
            image.convert("RGB").save(out, "JPEG", quality=85)
        return True
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        log.warning("report: no thumbnail for %s (%s)", source, exc)
        return False


def thumbnails(data: DataConfig, embed_dir: Path, image_ids: Iterable[int], folder: Path) -> dict[int, str]:
    """image_id -> thumbnail file name under `folder`, each image made once; unreadable images are left out."""
    folder.mkdir(parents=True, exist_ok=True)
    made = {}
    for image_id, source in image_sources(data, file_names(embed_dir, image_ids)).items():
        name = f"{image_id}.jpg"
        if make_thumbnail(source, folder / name):
            made[image_id] = name
    return made
