"""`mine --by text`: neighbours by what the captions say rather than what the images show, after SemEval-2017's
pair selection by sentence similarity. Each image's vector is the normalised mean of its captions' sentence
embeddings (the filter's encoder: `filter.text_encoder`, `filter.text_pooling`), written as an embeddings table in
the staging folder, so the same search, recall measurement and pairs run on it. `image_cosine` is then the cosine
of the two images' caption vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from csts_pipeline.pipeline.schemas import embeddings_schema
from csts_pipeline.pipeline.shards import shard_name, write_table
from csts_pipeline.pipeline.text_encoder import encode_texts

TEXT_DIR = "_text"  # hidden from the output listing; removed with the neighbour lists
ROWS_PER_SHARD = 10_000


def caption_vectors(captions: Path, image_ids: np.ndarray, model, batch_size: int, folder: Path) -> Path:
    """Writes `folder/part-*.parquet` (image_id, file_name "", embedding) in the row order of `image_ids`, from
    the captions table at `captions`, encoded in batches; returns `folder`."""
    order = np.argsort(image_ids, kind="stable")
    sums: np.ndarray | None = None
    for batch in pq.ParquetFile(captions).iter_batches(batch_size=65_536, columns=["image_id", "caption"]):
        vectors = encode_texts(model, batch.column("caption").to_pylist(), batch_size)
        if sums is None:
            sums = np.zeros((len(image_ids), vectors.shape[1]), np.float32)
        owners = batch.column("image_id").to_numpy()
        np.add.at(sums, order[np.searchsorted(image_ids, owners, sorter=order)], vectors)
    assert sums is not None  # every embedded image has a caption (CaptionIndex.build checked)
    sums /= np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    dim = sums.shape[1]
    for shard, lo in enumerate(range(0, len(image_ids), ROWS_PER_SHARD)):
        hi = min(len(image_ids), lo + ROWS_PER_SHARD)
        flat = pa.array(sums[lo:hi].reshape(-1), pa.float32())
        columns = [pa.array(image_ids[lo:hi], pa.int64()), pa.array([""] * (hi - lo), pa.string())]
        columns.append(pa.FixedSizeListArray.from_arrays(flat, dim))
        write_table(pa.Table.from_arrays(columns, schema=embeddings_schema(dim)), folder / shard_name(shard))
    return folder
