"""The coarse quantiser of an IVF index: a flat one (every centroid, one matrix product a block of queries) against
an HNSW graph over the same centroids (`IVF{lists}_HNSW32`, what mine builds from HNSW_QUANTIZER_FROM lists).

    python -m bench.mine.coarse_quantizer runs/bench-scale/10000000/.mine.next/_knn --nprobe 256 384

The folder is a saved mine index (`index.faiss`); its centroids, and a block of `--batch` rows of its re-ranking
copy as queries. Per nprobe: milliseconds a query to find the nprobe lists each way (alternating, `--repeats`
times, medians), and how many of the flat quantiser's lists the graph also finds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from csts_pipeline.stages.mine.budget import QUANTIZER_EF_SEARCH, QUANTIZER_M
from csts_pipeline.stages.mine.rerank import StoredRows


def main() -> None:
    import faiss

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--nprobe", type=int, nargs="+", default=[256])
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    index = faiss.read_index(str(args.folder / "index.faiss"))  # kept: the IVF view below borrows from it
    ivf = faiss.extract_index_ivf(index)
    centroids = ivf.quantizer.reconstruct_n(0, ivf.nlist)
    flat = faiss.IndexFlatIP(centroids.shape[1])
    flat.add(centroids)
    graph = faiss.IndexHNSWFlat(centroids.shape[1], QUANTIZER_M, faiss.METRIC_INNER_PRODUCT)
    graph.add(centroids)
    graph.hnsw.efSearch = QUANTIZER_EF_SEARCH  # the search widens it to nprobe where nprobe is larger
    with StoredRows(args.folder / "vectors.npy") as stored:
        rows = np.sort(np.random.default_rng(0).choice(stored.rows, args.batch, replace=False))
        queries = np.asarray(stored.read(rows), np.float32)
    for nprobe in args.nprobe:
        times: dict[str, list[float]] = {"flat": [], "hnsw": []}
        found: dict[str, np.ndarray] = {}
        for _ in range(args.repeats):
            for name, quantizer in (("flat", flat), ("hnsw", graph)):
                started = time.perf_counter()
                _, lists = quantizer.search(queries, nprobe)
                times[name].append((time.perf_counter() - started) * 1000 / len(queries))
                found[name] = lists
        shared = np.mean([len(np.intersect1d(a, b)) for a, b in zip(found["flat"], found["hnsw"])]) / nprobe
        flat_ms, hnsw_ms = np.median(times["flat"]), np.median(times["hnsw"])
        print(
            f"{ivf.nlist} lists, nprobe {nprobe}: flat {flat_ms:.3f} ms/query, HNSW{QUANTIZER_M} {hnsw_ms:.3f} "
            f"({hnsw_ms / flat_ms:.2f}x the flat time); the graph finds {shared:.4f} of the flat lists"
        )


if __name__ == "__main__":
    main()
