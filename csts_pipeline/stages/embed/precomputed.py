"""Precomputed CLIP image embeddings (clip-retrieval's `img_emb/*.npy`) in place of the model: each shard's rows
are read from the memory-mapped arrays, L2-normalised as the embed stage's own output is, and written as shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.embed.encoder import ImageList, embeddings_table
from csts_pipeline.stages.embed.readers.archives import embedding_array


def precomputed_dim(images: ImageList) -> int:
    return int(embedding_array(Path(images.members[0].path)).shape[1])


def precomputed_shard(images: ImageList, shard: int) -> pa.Table:
    """The embeddings table of one shard: rows grouped by their .npy file, read with one gather per file."""
    positions = np.asarray(images.positions(shard), np.int64)
    members = [images.members[p] for p in positions]
    paths = np.asarray([member.path for member in members])
    rows = np.asarray([member.row for member in members], np.int64)
    vectors = np.empty((len(members), precomputed_dim(images)), np.float32)
    for path in np.unique(paths):
        mine = paths == path
        vectors[mine] = embedding_array(Path(path), vectors.shape[1])[rows[mine]]
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        first = int(np.argmax(bad))
        raise UserError(
            f"{paths[first]}: row {rows[first]} (image {images.image_ids[positions[first]]}) is not finite "
            f"(NaN or infinity), {int(bad.sum())} such rows in shard {shard}; fix or drop them"
        )
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors /= np.where(norms > 0, norms, 1)
    ids = np.asarray([images.image_ids[p] for p in positions], np.int64)
    return embeddings_table(ids, [images.file_names[p] for p in positions], vectors, images.dtype)
