"""The embed stage's model work: an open_clip image tower, a loader over the images, Parquet shards.

Reader: one DataLoader over every pending image (workers decode and preprocess, or read bytes for nvJPEG;
stages.embed.images). Mapper: batched inference under `torch.inference_mode`, autocast on CUDA. Writer: a
background thread writing one Parquet shard per `images_per_shard` images as each completes.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from csts_pipeline.pipeline.device import autocast_dtype
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import EmbedConfig
from csts_pipeline.pipeline.schemas import embeddings_schema
from csts_pipeline.pipeline.shards import shard_name, write_table
from csts_pipeline.pipeline.weights import check_weights
from csts_pipeline.stages.embed.images import choose_decode, image_batches


@dataclass
class ClipImageEncoder:
    model: torch.nn.Module
    preprocess: Callable
    preprocess_config: dict
    dim: int
    name: str


def load_clip(config: EmbedConfig, device: torch.device) -> ClipImageEncoder:
    """open_clip by name + pretrained tag (or checkpoint path), or a config JSON built with random weights."""
    import open_clip

    name, pretrained = config.model, config.pretrained
    if config.model_config_path is not None:
        if not config.model_config_path.is_file():
            raise UserError(f"{config.model_config_path}: model config not found")
        open_clip.add_model_config(config.model_config_path)
        name, pretrained = config.model_config_path.stem, None
    if name not in open_clip.list_models():
        raise UserError(f"unknown open_clip model {name!r}; see open_clip.list_models()")
    if pretrained is not None and Path(pretrained).expanduser().is_file():
        check_weights(pretrained)  # a damaged checkpoint: one line naming it, not the loader's traceback
    torch.manual_seed(0)  # random-init configs give the same weights on every run, so resumed shards match
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(name, pretrained=pretrained, device=device)
    except (RuntimeError, pickle.UnpicklingError, EOFError, KeyError, ValueError) as exc:
        detail = (str(exc).splitlines() or [""])[0][:200]
        raise UserError(
            f"cannot load CLIP {name}/{pretrained} (embed.pretrained): {exc.__class__.__name__}: {detail}"
        ) from None
    except OSError as exc:  # no network and nothing cached
        raise UserError(
            f"cannot load CLIP weights {name}/{pretrained} ({exc.__class__.__name__}); download them first or "
            "set embed.pretrained to a local checkpoint path"
        ) from None
    model.eval()
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    dim = int(model.visual.output_dim)
    return ClipImageEncoder(
        model=model,
        preprocess=preprocess,
        preprocess_config=open_clip.get_model_preprocess_cfg(model),
        dim=dim,
        name=f"{name}/{pretrained}",
    )


Batch = tuple[list[int], torch.Tensor | None, list[tuple[int, str]]]


def embed_batches(
    encoder: ClipImageEncoder,
    paths: list[Path],
    *,
    device: torch.device,
    batch_size: int,
    num_workers: int,
    precision: str = "auto",
    decode: str = "auto",
) -> Iterator[Batch]:
    """Per batch, in path order: (rows of `paths` embedded, their float32 unit vectors on the CPU, failures).

    One loader serves every path, so its workers stay busy across shard boundaries. On CUDA the vectors are
    copied to the CPU without blocking: synchronize the device before reading them.
    """
    dtype = autocast_dtype(device, precision)
    batches = image_batches(
        paths,
        choose_decode(decode, device),
        device=device,
        batch_size=batch_size,
        num_workers=num_workers,
        preprocess=encoder.preprocess,
        preprocess_config=encoder.preprocess_config,
        decoder=decode,
    )
    for indices, batch, failed in batches:
        if batch is None:
            yield indices, None, failed
            continue
        with torch.inference_mode():
            on_cpu = encode(encoder, batch, device, dtype).to("cpu", non_blocking=True)
        yield indices, on_cpu, failed


def encode(encoder: ClipImageEncoder, batch: torch.Tensor, device: torch.device, dtype: torch.dtype | None):
    """Unit vectors (float32, on `device`) of a preprocessed batch: the one inference step of both executors."""
    if device.type == "cuda":
        batch = batch.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode(), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        return torch.nn.functional.normalize(encoder.model.encode_image(batch).float(), dim=-1)


@dataclass
class ImageList:
    """The dataset's images in shard order: shard `s` holds positions [s * per_shard, (s + 1) * per_shard)."""

    image_ids: list[int]
    file_names: list[str]
    image_root: Path
    per_shard: int
    members: list | None = (
        None  # archive formats: stages.embed.readers.archives.Member per image, read instead of a file
    )
    dtype: str = "float32"  # as stored (embed.dtype)

    def source(self, position: int):
        """What the loader opens for an image: its file, or its archive member."""
        if self.members is not None:
            return self.members[position]
        return self.image_root / self.file_names[position]

    @property
    def n_shards(self) -> int:
        return (len(self.image_ids) + self.per_shard - 1) // self.per_shard

    def positions(self, shard: int) -> range:
        return range(shard * self.per_shard, min(len(self.image_ids), (shard + 1) * self.per_shard))


def write_embedding_shards(
    encoder: ClipImageEncoder,
    images: ImageList,
    *,
    shards: list[int],
    folder: Path,
    device: torch.device,
    config: EmbedConfig,
) -> Iterator[tuple[int, list[dict]]]:
    """Embeds the images of `shards`, writes `part-<shard>.parquet` for each into `folder`, and yields
    (shard, images that could not be read) once each shard is on disk.

    Reading (DataLoader workers), inference (this thread) and writing (a background thread) overlap: a shard is
    handed to the writer as soon as its last image is embedded, while the loader keeps going. At most one write
    is in flight, so memory stays bounded by two shards.
    """
    positions = np.asarray([p for s in shards for p in images.positions(s)], np.int64)
    shard_ends = np.cumsum([len(images.positions(s)) for s in shards])
    paths = [images.source(p) for p in positions]
    buffers: dict[int, tuple[list[int], list[torch.Tensor], list[tuple[int, str]]]] = {s: ([], [], []) for s in shards}
    next_to_write, consumed = 0, 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-writer") as writer:
        in_flight: tuple[int, list[dict], Future] | None = None
        batches = embed_batches(
            encoder,
            paths,
            device=device,
            batch_size=config.batch_size,
            num_workers=config.num_workers,
            precision=config.precision,
            decode=config.decode,
        )
        for indices, vectors, failed in batches:
            _buffer_batch(images, positions, buffers=buffers, indices=indices, vectors=vectors, failed=failed)
            consumed += len(indices) + len(failed)
            if in_flight is not None and in_flight[2].done():  # report a finished shard at once
                in_flight[2].result()
                yield in_flight[0], in_flight[1]
                in_flight = None
            while next_to_write < len(shards) and shard_ends[next_to_write] <= consumed:
                shard = shards[next_to_write]
                if device.type == "cuda":
                    torch.cuda.synchronize(device)  # the shard's vectors have landed on the CPU
                table, skipped = _shard_table(images, *buffers.pop(shard), dim=encoder.dim)
                if in_flight is not None:
                    in_flight[2].result()  # re-raises a failed write here
                    yield in_flight[0], in_flight[1]
                in_flight = (shard, skipped, writer.submit(write_table, table, folder / shard_name(shard)))
                next_to_write += 1
        if in_flight is not None:
            in_flight[2].result()
            yield in_flight[0], in_flight[1]


def _buffer_batch(images: ImageList, positions: np.ndarray, *, buffers: dict, indices, vectors, failed) -> None:
    """Files a batch's vectors (and failures) under the shards their images belong to."""
    rows = positions[np.asarray(indices, np.int64)]
    row_shards = rows // images.per_shard  # non-decreasing: batches and shards are in position order
    for shard in np.unique(row_shards).tolist():
        lo, hi = np.searchsorted(row_shards, shard, "left"), np.searchsorted(row_shards, shard, "right")
        buffers[shard][0].extend(rows[lo:hi].tolist())
        buffers[shard][1].append(vectors[lo:hi])  # a view: the copy from the GPU may still be running
    for index, reason in failed:
        position = int(positions[index])
        buffers[position // images.per_shard][2].append((position, reason))


def _shard_table(
    images: ImageList, rows: list[int], vectors: list[torch.Tensor], failures: list[tuple[int, str]], dim: int
) -> tuple[pa.Table, list[dict]]:
    """One shard's rows, with the images that could not be read in its `skipped` metadata (and returned)."""
    embedded = torch.cat(vectors).numpy() if vectors else np.zeros((0, dim), np.float32)
    ids = np.asarray([images.image_ids[p] for p in rows], np.int64)
    table = embeddings_table(ids, [images.file_names[p] for p in rows], embedded, images.dtype)
    skipped = [
        {"image_id": images.image_ids[p], "file_name": images.file_names[p], "reason": reason} for p, reason in failures
    ]
    return table.replace_schema_metadata({"skipped": json.dumps(skipped)}), skipped


def embeddings_table(
    image_ids: np.ndarray, file_names: list[str], vectors: np.ndarray, dtype: str = "float32"
) -> pa.Table:
    """The embeddings table, its vectors stored as `dtype` (float32, or float16: half the bytes)."""
    dim = vectors.shape[1]
    flat = pa.array(np.ascontiguousarray(vectors, dtype).reshape(-1))
    columns = [pa.array(image_ids, pa.int64()), pa.array(file_names, pa.string())]
    columns.append(pa.FixedSizeListArray.from_arrays(flat, dim))
    return pa.Table.from_arrays(columns, schema=embeddings_schema(dim, dtype))
