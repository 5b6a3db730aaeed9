"""How many codes an IVF index must scan for a recall, on a corpus too large to index for the question.

    python -m bench.mine.ivf_coverage runs/bench-scale/10000000/embed/embeddings --lists 12649

For held-out queries of the bench's mixture (bench.mine.hard_data, never in the base) it computes the exact top-k over
the whole embed folder (streamed block by block), trains the coarse k-means as mine would (32 points a list past
262,144, spherical, 10 iterations), and assigns the true neighbours to their lists. The recall of IVF-Flat at
nprobe p is then the share of true neighbours whose list is among the query's p nearest lists (the probe), and
the codes scanned are the sizes of those lists (estimated from a seeded 1M-row sample). No index is built, so the
curve of 10M images takes minutes; a compressed index re-ranked from these lists can only lose recall from here.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.mine.hard_data import HOLDOUT_SHARD, mixture_shard
from csts_pipeline.stages.mine.ann import exact_top_k
from csts_pipeline.stages.mine.budget import TRAIN_CAP
from csts_pipeline.stages.mine.vectors import EmbeddingShards

PROBES = (16, 32, 64, 128, 256, 512, 1024)


def coverage_curve(shards: EmbeddingShards, queries: np.ndarray, lists: int, k: int, seed: int = 0) -> list[dict]:
    """Per nprobe: recall@k of IVF-Flat with `lists` lists on `queries`, and the mean codes a query scans."""
    import faiss

    n = len(shards)
    rng = np.random.default_rng(seed)
    truth = exact_top_k(shards, None, k, queries=queries, block=65_536)
    training = shards.rows(np.sort(rng.choice(n, min(n, max(TRAIN_CAP, 32 * lists)), replace=False)))
    kmeans = faiss.Kmeans(shards.dim, lists, niter=10, seed=seed, spherical=True)
    kmeans.train(training)
    coarse = faiss.IndexFlatIP(shards.dim)
    coarse.add(kmeans.centroids)
    wanted = np.unique(truth)
    owner = np.empty(n, np.int32)  # only the true neighbours' entries are filled
    owner[wanted] = coarse.search(shards.rows(wanted), 1)[1][:, 0]
    sample = np.sort(rng.choice(n, min(n, 1_000_000), replace=False))
    sizes = np.bincount(coarse.search(shards.rows(sample), 1)[1][:, 0], minlength=lists) * n / len(sample)
    probes = coarse.search(np.ascontiguousarray(queries, np.float32), min(lists, max(PROBES)))[1]
    lists_of_truth = owner[truth]
    rows = []
    for p in (p for p in PROBES if p <= lists):
        hits = (lists_of_truth[:, :, None] == probes[:, None, :p]).any(axis=2)
        rows.append({"nprobe": p, "recall": float(hits.mean()), "codes": float(sizes[probes[:, :p]].sum(1).mean())})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("embeddings", type=Path, help="an embed output's embeddings folder (bench/mine/scale.py's)")
    parser.add_argument("--lists", type=int, required=True)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--queries", type=int, default=1000, help="held-out queries of the mixture")
    args = parser.parse_args()
    started = time.perf_counter()
    shards = EmbeddingShards(args.embeddings)
    queries = mixture_shard(args.queries, shards.dim, 0, HOLDOUT_SHARD).astype(shards.dtype).astype(np.float32)
    print(f"{len(shards):,} images, {args.lists:,} lists, recall@{args.k} on {args.queries} held-out queries")
    for row in coverage_curve(shards, queries, args.lists, args.k):
        print(f"nprobe {row['nprobe']:>5}  recall {row['recall']:.4f}  codes scanned a query {row['codes']:>11,.0f}")
    print(f"({time.perf_counter() - started:.0f}s)")


if __name__ == "__main__":
    main()
