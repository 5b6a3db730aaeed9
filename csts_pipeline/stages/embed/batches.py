"""embed's units as a batch pipeline (pipeline.cluster.BatchPipeline), which the Ray executor runs on Ray Data.

- rows: one per pending image: its unit and its position in the dataset (stages.embed.encoder.ImageList).
- `Decode`, stateless CPU tasks: PIL and open_clip's preprocess up to its to-tensor step, shipping uint8 pixels
  (stages.embed.images.split_preprocess); with `embed.decode: device`, only the file bytes (decoded in the actor).
- `ClipActor`, an actor pool: each actor runs the stage's `setup()` once (CLIP on its device), finishes the
  preprocess (to float, normalise; or decodes on its GPU: stages.embed.decoders) and embeds
  (stages.embed.encoder.encode).
- `collect`, on the driver: one unit's rows, in position order, written as the local executor's shard.

Same images, same operations, same model: the shards equal the local executor's (tests/frame/test_ray.py). An image
that cannot be read travels as a row with its reason and no pixels, so every unit gets all of its rows back.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import torch

from csts_pipeline.pipeline.cluster import BatchPipeline, BatchStep
from csts_pipeline.pipeline.shards import write_table
from csts_pipeline.pipeline.stage import Resources, Unit
from csts_pipeline.stages.embed.decoders import device_decoder
from csts_pipeline.stages.embed.encoder import ImageList, _shard_table, encode
from csts_pipeline.stages.embed.images import (
    DevicePreprocess,
    _FileBytes,
    _PreprocessedImages,
    choose_decode,
    split_preprocess,
)

Batch = dict[str, np.ndarray]


def embed_pipeline(stage: Any, units: list[Unit]) -> BatchPipeline:
    """The pipeline of an EmbedStage after its driver-side `setup()` (its encoder names the preprocess)."""
    images: ImageList = stage.images
    mode = choose_decode(stage.config.decode, stage.device)
    index = np.concatenate([np.full(unit.size, i, np.int64) for i, unit in enumerate(units)])
    positions = np.concatenate([np.asarray(images.positions(unit.payload["shard"])) for unit in units])
    pixels = None if mode == "device" else split_preprocess(stage.encoder.preprocess)[0]
    batch, threads = stage.config.batch_size, torch.get_num_threads()
    steps = [
        BatchStep(Decode(images, pixels), Resources(cpus=1), batch),
        BatchStep(ClipActor, Resources(cpus=1, gpus=stage.resources.gpus), batch, args=(stage, mode, threads)),
    ]
    collect = functools.partial(collect_shard, images, stage.encoder.dim)
    return BatchPipeline({"unit": index, "position": positions}, steps, collect)


class Decode:
    """CPU tasks: a batch of positions -> uint8 pixels (or file bytes), and "" or the reason an image failed."""

    def __init__(self, images: ImageList, pixels: Any | None):
        self.images, self.pixels = images, pixels

    def __call__(self, batch: Batch) -> Batch:
        sources = [self.images.source(int(p)) for p in batch["position"]]
        if self.pixels is None:
            files = _FileBytes(sources)
            read = [files[i] for i in range(len(sources))]
            data = np.array([b"" if t is None else t.numpy().tobytes() for _, t, _ in read], dtype=object)
            return batch | {"data": data, "error": np.array([reason for _, _, reason in read], dtype=object)}
        opened = _PreprocessedImages(sources, self.pixels)
        read = [opened[i] for i in range(len(sources))]
        good = [pixels for _, pixels, _ in read if pixels is not None]
        shape, dtype = (good[0].shape, good[0].dtype) if good else ((0,), np.uint8)
        image = np.zeros((len(read), *shape), dtype)
        for row, (_, pixels, _) in enumerate(read):
            if pixels is not None:
                image[row] = pixels
        return batch | {"image": image, "error": np.array([reason for _, _, reason in read], dtype=object)}


class ClipActor:
    """One actor of the pool: CLIP loaded once by the stage's `setup()`, then batches of decoded rows -> vectors.
    On a CPU it computes on the driver's thread count, as the local executor would on that machine."""

    def __init__(self, stage: Any, mode: str, threads: int):
        from csts_pipeline.pipeline.device import autocast_dtype

        stage.setup()
        if stage.device.type == "cpu":  # CPU kernels round by thread count: the driver's, for the local bits
            torch.set_num_threads(threads)
        self.encoder, self.device = stage.encoder, stage.device
        self.dtype = autocast_dtype(stage.device, stage.config.precision)
        self.finish = split_preprocess(stage.encoder.preprocess)[1]
        self.on_device = None
        if mode == "device":
            decoder = device_decoder(stage.config.decode, stage.device)
            self.on_device = DevicePreprocess(stage.encoder.preprocess_config, stage.device, decoder)

    def __call__(self, batch: Batch) -> Batch:
        error = batch["error"].astype(object)
        ok = np.flatnonzero(error == "")
        if self.on_device is not None and len(ok):
            data = [torch.frombuffer(bytearray(batch["data"][row]), dtype=torch.uint8) for row in ok]
            decoded, tensor, failed = self.on_device(data)
            for position, reason in failed:
                error[ok[position]] = reason
            ok = ok[decoded]
        elif len(ok):
            tensor = self.finish(batch["image"][ok]).to(self.device)
        vectors = np.zeros((len(error), self.encoder.dim), np.float32)
        if len(ok):
            vectors[ok] = encode(self.encoder, tensor, self.device, self.dtype).cpu().numpy()
        return {"unit": batch["unit"], "position": batch["position"], "embedding": vectors, "error": error}


def collect_shard(images: ImageList, dim: int, unit: Unit, rows: Batch, staging: Path) -> dict[str, Any]:
    """One unit's rows as its shard, with what the local executor's `process` returns."""
    order = np.argsort(rows["position"], kind="stable")
    positions, errors = rows["position"][order], rows["error"][order].astype(str)
    ok = errors == ""
    vectors = [torch.from_numpy(np.ascontiguousarray(rows["embedding"][order][ok], dtype=np.float32))]
    failures = list(zip(positions[~ok].tolist(), errors[~ok].tolist()))
    table, skipped = _shard_table(images, positions[ok].tolist(), vectors, failures, dim)
    write_table(table, staging / unit.key)
    return {"images": unit.size, "embedded": unit.size - len(skipped), "skipped": skipped}
