"""embed: every image of the dataset through an open_clip image tower, L2-normalised, written as shards.

Reader: the manifest's dataset (pipeline.datasets). Mapper: a DataLoader whose workers decode and preprocess
JPEGs, batched inference under `torch.inference_mode` with autocast on CUDA. Writer: one Parquet shard per
`images_per_shard` images plus `captions.parquet`; schemas in docs/schemas.md.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from tqdm import tqdm

from pipeline.datasets import Corpus, read_dataset
from pipeline.device import autocast_dtype, resolve_device
from pipeline.errors import UserError
from pipeline.images import choose_decode, image_batches
from pipeline.manifest import EmbedConfig, Manifest
from pipeline.records import StageRun, file_fingerprint, fingerprint
from pipeline.shards import list_shards, read_table, shard_name, write_table

log = logging.getLogger(__name__)
STAGE = "embed"


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
    torch.manual_seed(0)  # random-init configs give the same weights on every run, so resumed shards match
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(name, pretrained=pretrained, device=device)
    except RuntimeError as exc:
        raise UserError(f"cannot load CLIP {name}/{pretrained}: {str(exc).splitlines()[0]}") from None
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


def embed_images(
    encoder: ClipImageEncoder,
    paths: list[Path],
    device: torch.device,
    batch_size: int,
    num_workers: int,
    precision: str = "auto",
    decode: str = "auto",
    progress: tqdm | None = None,
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str]]]:
    """Embeds `paths`; returns (row indices that succeeded, float32 unit vectors, [(row, reason)] failures)."""
    dtype = autocast_dtype(device, precision)
    batches = image_batches(
        paths,
        choose_decode(decode, device),
        device,
        batch_size,
        num_workers,
        encoder.preprocess,
        encoder.preprocess_config,
    )
    rows: list[int] = []
    vectors: list[torch.Tensor] = []
    failures: list[tuple[int, str]] = []
    with torch.inference_mode(), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        for indices, batch, failed in batches:
            failures.extend(failed)
            if batch is not None:
                if device.type == "cuda":
                    batch = batch.contiguous(memory_format=torch.channels_last)
                features = encoder.model.encode_image(batch).float()
                vectors.append(torch.nn.functional.normalize(features, dim=-1).to("cpu", non_blocking=True))
                rows.extend(indices)
            if progress is not None:
                progress.update(len(indices) + len(failed))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    embedded = torch.cat(vectors).numpy() if vectors else np.zeros((0, encoder.dim), np.float32)
    return np.asarray(rows, np.int64), embedded.astype(np.float32), failures


def embeddings_table(image_ids: np.ndarray, file_names: list[str], vectors: np.ndarray) -> pa.Table:
    dim = vectors.shape[1]
    flat = pa.array(vectors.reshape(-1), pa.float32())
    return pa.table(
        {
            "image_id": pa.array(image_ids, pa.int64()),
            "file_name": pa.array(file_names, pa.string()),
            "embedding": pa.FixedSizeListArray.from_arrays(flat, dim),
        }
    )


def plan(manifest: Manifest, corpus: Corpus | None = None) -> StageRun:
    """Parameters that change the embeddings, and fingerprints of what they are computed from."""
    corpus = corpus or read_dataset(manifest.data)
    config = manifest.embed
    model_config = (
        file_fingerprint(config.model_config_path)
        if config.model_config_path is not None and config.model_config_path.is_file()
        else None
    )
    params = {
        "model": config.model if model_config is None else config.model_config_path.stem,
        "pretrained": config.pretrained if model_config is None else None,
        "model_config": model_config,
        "precision": config.precision,
        "images_per_shard": config.images_per_shard,
    }
    stats = [(corpus.image_root / name).stat() for name in corpus.file_names]
    listing = [(name, st.st_size, st.st_mtime_ns) for name, st in zip(corpus.file_names, stats)]
    inputs = {"captions": file_fingerprint(manifest.data.captions), "images": fingerprint(listing)}
    return StageRun(STAGE, manifest.work_dir / STAGE, params, inputs)


def run(manifest: Manifest, force: bool = False) -> dict:
    """Embed every image of the manifest's dataset into `<work_dir>/embed/`."""
    corpus = read_dataset(manifest.data)
    if not corpus.image_ids:
        raise UserError(f"{manifest.data.captions}: no images with captions and files found")
    stage = plan(manifest, corpus)
    if stage.is_done() and not force:
        log.info("embed: up to date in %s (nothing to do; --force recomputes)", stage.folder)
        return {"status": "up-to-date", "folder": str(stage.folder)}
    resumed = stage.begin(force=force)
    write_table(corpus.captions_table(), stage.folder / "captions.parquet")

    config = manifest.embed
    device = resolve_device(manifest.run.device)
    encoder = load_clip(config, device)
    per_shard = config.images_per_shard
    n_images = len(corpus.image_ids)
    n_shards = (n_images + per_shard - 1) // per_shard
    done = {p.name for p in list_shards(stage.folder)} if resumed else set()
    started, processed = time.perf_counter(), 0
    with tqdm(total=n_images, desc="embed", unit="img", dynamic_ncols=True) as progress:
        for shard in range(n_shards):
            lo, hi = shard * per_shard, min(n_images, (shard + 1) * per_shard)
            if shard_name(shard) in done:
                progress.update(hi - lo)
                continue
            processed += hi - lo
            paths = [corpus.image_root / name for name in corpus.file_names[lo:hi]]
            rows, vectors, failures = embed_images(
                encoder, paths, device, config.batch_size, config.num_workers, config.precision, config.decode, progress
            )
            ids = np.asarray(corpus.image_ids[lo:hi], np.int64)[rows]
            names = [corpus.file_names[lo + r] for r in rows]
            skipped = [
                {
                    "image_id": corpus.image_ids[lo + r],
                    "file_name": corpus.file_names[lo + r],
                    "reason": reason,
                }
                for r, reason in failures
            ]
            table = embeddings_table(ids, names, vectors)
            table = table.replace_schema_metadata({"skipped": json.dumps(skipped)})
            write_table(table, stage.folder / shard_name(shard))
    seconds = time.perf_counter() - started

    skipped_images: list[dict] = []
    embedded = 0
    for path in list_shards(stage.folder):
        table = read_table(path, ["image_id"])
        embedded += table.num_rows
        meta = table.schema.metadata or {}
        skipped_images.extend(json.loads(meta.get(b"skipped", b"[]")))
    counts = {
        "images_in_dataset": n_images,
        "images_embedded": embedded,
        "images_skipped": len(skipped_images),
        "captions": len(corpus.caption_ids),
        "shards": n_shards,
        "dim": encoder.dim,
    }
    return stage.finish(
        counts,
        model=encoder.name,
        device=str(device),
        resumed=resumed,
        images_per_second=round(processed / max(seconds, 1e-9), 2),
        skipped_images=skipped_images,
        reader_skips=[vars(s) for s in corpus.skips],
        reader_skip_counts=corpus.skip_counts(),
    )
