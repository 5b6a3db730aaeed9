"""IVF-PQ fast-scan codes of the vectors themselves (`PQ{m}x4fs`) against codes of their residuals from the list
centroid (`PQ{m}x4fsr`, mine's choice): recall@64 after exact re-ranking, over nprobe and candidates.

    python -m bench.mine.pq_codes --images 1000000

The bench's mixture data (bench.mine.hard_data, float16 as stored) in one array; 1,000 held-out queries from the same
source and their exact top-64. One k-means (sqrt(N) lists, 4 sqrt(N) from a million, as mine plans) serves every
variant, so the codes alone differ. Each line: variant, nprobe, candidates, recall@64 after re-ranking, and the
seconds of the FAISS search (before re-ranking) for the 1,000 queries.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.mine.hard_data import HOLDOUT_SHARD, mixture_shard
from csts_pipeline.stages.mine.ann import recall_at_k
from csts_pipeline.stages.mine.budget import ivf_lists
from csts_pipeline.stages.mine.rerank import rerank

SHARD = 100_000
VARIANTS = (("PQ256x4fs", 256, False), ("PQ256x4fsr", 256, True), ("PQ128x4fsr", 128, True))


def main() -> None:
    import faiss

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--nprobe", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--candidates", type=int, nargs="+", default=[512, 1024, 2048])
    args = parser.parse_args()

    n, dim = args.images, args.dim
    shards = [mixture_shard(min(SHARD, n - lo), dim, 0, i) for i, lo in enumerate(range(0, n, SHARD))]
    base = np.concatenate(shards).astype(np.float16)
    queries = mixture_shard(1000, dim, 0, HOLDOUT_SHARD).astype(np.float16).astype(np.float32)
    truth = np.argpartition(-(queries @ base.astype(np.float32).T), 63, axis=1)[:, :64]
    lists = ivf_lists(n, None)
    rng = np.random.default_rng(0)
    sample = base[np.sort(rng.choice(n, min(n, 64 * lists), replace=False))].astype(np.float32)
    started = time.perf_counter()
    kmeans = faiss.Kmeans(dim, lists, niter=10, seed=0)
    kmeans.train(sample)
    print(f"{n} images, {lists} lists (k-means {time.perf_counter() - started:.0f} s)", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "vectors.npy"
        np.save(copy, base)
        for name, m, residual in VARIANTS:
            coarse = faiss.IndexFlatIP(dim)
            coarse.add(kmeans.centroids)
            index = faiss.IndexIVFPQFastScan(coarse, dim, lists, m, 4, faiss.METRIC_INNER_PRODUCT)
            index.by_residual = residual
            index.train(sample)
            for lo in range(0, n, SHARD):
                index.add(base[lo : lo + SHARD].astype(np.float32))
            for nprobe in args.nprobe:
                index.nprobe = nprobe
                for candidates in args.candidates:
                    started = time.perf_counter()
                    _, found = index.search(queries, candidates)
                    seconds = time.perf_counter() - started
                    _, top = rerank(queries, found, copy, 64)
                    recall = recall_at_k(top, truth)
                    print(
                        f"{name:<11} nprobe {nprobe:>4} candidates {candidates:>5}: recall@64 {recall:.4f}  "
                        f"search {seconds:.2f} s",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
