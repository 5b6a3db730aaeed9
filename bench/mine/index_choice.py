"""Exact against IVF through mine's own search functions, for choosing `mine.exact_below` (docs/mine.md).

    python -m bench.mine.index_choice 25000 50000 100000

For each size: 512-d clustered synthetic vectors (bench.mine.scale.clustered_shard) written as embed shards, then
`build_searcher` + `search_all` with `ivf` (tuned to recall 0.95 on 1,000 queries) and with `exact`, k=64. Prints
one line per (size, index): wall seconds and the search record (recall, nprobe, build and tune seconds).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.mine.scale import clustered_shard
from csts_pipeline.pipeline.manifest import MineConfig
from csts_pipeline.pipeline.shards import shard_name, write_table
from csts_pipeline.stages.embed.encoder import embeddings_table
from csts_pipeline.stages.mine.search import build_searcher, search_all
from csts_pipeline.stages.mine.vectors import EmbeddingShards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--dim", type=int, default=512)
    args = parser.parse_args()
    for n in args.sizes:
        folder = Path(tempfile.mkdtemp(prefix="index-choice-"))
        for shard, lo in enumerate(range(0, n, 10_000)):
            ids = np.arange(lo, min(n, lo + 10_000))
            vectors = clustered_shard(len(ids), args.dim, 0, shard)
            write_table(embeddings_table(ids, [""] * len(ids), vectors), folder / "embeddings" / shard_name(shard))
        shards = EmbeddingShards(folder / "embeddings")
        for kind in ("ivf", "exact"):
            started = time.perf_counter()
            searcher, info = build_searcher(kind, shards, MineConfig(), torch.device("cpu"))
            search_all(searcher, shards, k=64, batch=8192, folder=folder / kind)
            info.pop("tried", None)
            print(f"{n:>9} {kind:<5} {time.perf_counter() - started:8.1f}s {info}", flush=True)
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
