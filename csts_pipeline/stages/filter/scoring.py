"""What the filter computes for any set of caption pairs: distinct sentences, their embeddings (cached on disk
by encoder and texts), and the output columns of scored pairs."""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import FilterConfig
from csts_pipeline.pipeline.records import fingerprint, read_json, write_json
from csts_pipeline.pipeline.shards import write_atomic
from csts_pipeline.stages.filter.criteria import CRITERIA, ScoredPairs
from csts_pipeline.stages.filter.text import encode_texts, load_text_encoder

log = logging.getLogger(__name__)


def unique_texts(texts: list[str]) -> tuple[list[str], np.ndarray]:
    """Distinct texts in order of first appearance, and each input's row among them."""
    rows: dict[str, int] = {}
    inverse = np.fromiter((rows.setdefault(text, len(rows)) for text in texts), np.int64, len(texts))
    return list(rows), inverse


ENCODE_BLOCK = 65_536  # distinct sentences per encoding task: one GPU actor's share on a cluster


def sentence_embeddings(
    config: FilterConfig,
    texts: list[str],
    *,
    device: Any,
    cache_dir: Path | None = None,
    tasks: Any = None,
    device_setting: str = "auto",
) -> tuple[np.ndarray, dict]:
    """Unit embeddings of `texts` with the configured encoder; read from `cache_dir` when this encoder has
    encoded these texts before, else encoded and stored there (atomically). With a distributed `tasks`
    (pipeline.stage; the Ray executor's), blocks of ENCODE_BLOCK texts are encoded as tasks that each ask for a
    GPU, resolving `device_setting` where they run."""
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()
    key = fingerprint({"encoder": config.text_encoder, "pooling": config.text_pooling, "texts": digest})
    path = cache_dir / f"{key}.npy" if cache_dir is not None else None
    if path is not None and path.is_file():
        cached, problem = _cached_embeddings(path, len(texts))
        if cached is not None:
            log.info("filter: sentence embeddings from the cache %s", path)
            return cached, {"cache": str(path), "encoded": False, "dim": int(cached.shape[1])}
        log.warning("filter: %s: %s; encoding the sentences again", path, problem)
    started = time.perf_counter()
    if tasks is not None and tasks.distributed and len(texts) > 0:
        embeddings = encode_as_tasks(config, texts, device_setting, tasks)
    else:
        model = load_text_encoder(config.text_encoder, config.text_pooling, device)
        log.info("filter: encoding %d distinct sentences with %s on %s", len(texts), config.text_encoder, device)
        embeddings = encode_texts(model, texts, config.text_batch_size, progress=True)
    bad = ~np.isfinite(embeddings).all(axis=1)
    if bad.any():
        first = int(np.argmax(bad))
        raise UserError(
            f"filter: {config.text_encoder} gave a NaN or infinite embedding for {int(bad.sum())} sentence(s), "
            f"e.g. {texts[first][:80]!r}; nothing committed"
        )
    info = {"encoded": True, "dim": int(embeddings.shape[1]), "encode_seconds": round(time.perf_counter() - started, 3)}
    if path is not None:
        write_atomic(path, lambda handle: np.save(handle, embeddings))
        meta = {"encoder": config.text_encoder, "pooling": config.text_pooling, "texts": len(texts), **info}
        write_json(path.with_suffix(".json"), meta)
        info["cache"] = str(path)
    return embeddings, info


def _cached_embeddings(path: Path, rows: int) -> tuple[np.ndarray | None, str]:
    """The cached array when it is whole and sane (rows, width recorded beside it, finite unit vectors), else
    None and why: a cache is never trusted blindly, since a bad one would silently change every cosine."""
    try:
        cached = np.load(path, allow_pickle=False)
        meta = read_json(path.with_suffix(".json")) if path.with_suffix(".json").is_file() else {}
    except (OSError, ValueError, UserError) as exc:
        return None, f"unreadable ({exc.__class__.__name__})"
    if cached.ndim != 2 or cached.shape[0] != rows or cached.dtype.kind != "f":
        return None, f"shape {cached.shape} {cached.dtype}, expected ({rows}, dim) floats"
    if isinstance(meta, dict) and meta.get("dim") not in (None, cached.shape[1]):
        return None, f"{cached.shape[1]} columns, but the encoder gives {meta['dim']}"
    if not np.isfinite(cached).all():
        return None, "NaN or infinite values"
    norms = np.linalg.norm(cached, axis=1)
    if not ((np.abs(norms - 1) < 1e-2) | (norms == 0)).all():
        return None, "rows that are not unit vectors"
    return cached, ""


def encode_as_tasks(config: FilterConfig, texts: list[str], device_setting: str, tasks: Any) -> np.ndarray:
    """The texts in blocks, one task each, sharing one copy of the texts; each task runs the driver's torch
    thread count and asks for as many CPUs (and a GPU where the cluster has them)."""
    import torch

    from csts_pipeline.pipeline.stage import Resources

    threads = torch.get_num_threads()
    bounds = [(lo, min(len(texts), lo + ENCODE_BLOCK)) for lo in range(0, len(texts), ENCODE_BLOCK)]
    shared = (config.text_encoder, config.text_pooling, config.text_batch_size, device_setting, threads, texts)
    log.info("filter: encoding %d distinct sentences as %d tasks", len(texts), len(bounds))
    return np.concatenate(list(tasks.map(encode_block, bounds, shared, Resources(cpus=threads, gpus=1))))


def encode_block(shared: tuple, bounds: tuple[int, int]) -> np.ndarray:
    """One task of `encode_as_tasks`: texts[lo:hi] with the encoder, loaded on the device this task has."""
    import torch

    from csts_pipeline.pipeline.device import resolve_device

    name, pooling, batch_size, device_setting, threads, texts = shared
    torch.set_num_threads(threads)
    model = load_text_encoder(name, pooling, resolve_device(device_setting))
    return encode_texts(model, texts[bounds[0] : bounds[1]], batch_size)


def metric_columns(scored: ScoredPairs, select: np.ndarray) -> dict[str, pa.Array]:
    cosine = scored.metrics["simcse_cosine"][select]
    return {
        "iou": pa.array(scored.metrics["iou"][select].astype(np.float32)),
        "simcse_cosine": pa.array(cosine.astype(np.float32), mask=np.isnan(cosine)),
        "ratio": pa.array(scored.metrics["ratio"][select].astype(np.float32)),
        "length": pa.array(scored.metrics["length"][select].astype(np.int32)),
    }


def output_table(
    candidates: pa.Table,
    rows: tuple[np.ndarray, np.ndarray],
    *,
    texts: pa.Array,
    scored: ScoredPairs,
    select: np.ndarray,
    schema: pa.Schema,
) -> pa.Table:
    """The kept (or rejected) rows of one chunk of candidates, in the filter's schema; `rows` index `texts`."""
    take = pa.array(select, pa.int64())
    columns = {name: candidates.column(name).take(take) for name in ("pair_id", "image_id_1", "image_id_2")}
    columns |= {name: candidates.column(name).take(take) for name in ("caption_id_1", "caption_id_2")}
    columns["sentence1"] = texts.take(pa.array(rows[0][select]))
    columns["sentence2"] = texts.take(pa.array(rows[1][select]))
    columns["image_cosine"] = candidates.column("image_cosine").take(take).cast(pa.float32())
    columns |= metric_columns(scored, select)
    if "failed" in schema.names:
        columns["failed"] = pa.array(np.asarray(CRITERIA, object)[scored.first_failed[select]], pa.string())
    return pa.table(columns, schema=schema)
