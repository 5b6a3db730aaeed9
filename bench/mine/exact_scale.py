"""Exact top-k at millions of images on one device (mine.knn=torch): `stages.mine.knn.TorchSearch`, whose top-k
goes through group maxima (`top_k`), against the same search with plain `torch.topk` over every chunk.

    python bench/mine/exact_scale.py --images 1000000 --device cuda --dtype float16
    python bench/mine/exact_scale.py --images 10000000 --device cuda --dtype float16 --queries 1048576

Vectors: bench.mine.hard_data's mixture (512-d, unit length), generated shard by shard on --threads threads and held
in --dtype. Per N: generation and copy to the device; then the two top-k methods on the first --paired queries,
alternating (A B A B), each in query blocks of --query-batch; then --queries queries (all when 0) with the group
top-k, timed, for queries/s and the projected time for all N; then recall@k+1 of those searches against float64
scores on --check seeded rows (1.0: exact up to ties). Prints the device's peak memory and this process's peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import csts_pipeline.stages.mine.knn as knn
from bench.mine.hard_data import mixture_shard
from csts_pipeline.pipeline.device import resolve_device
from csts_pipeline.stages.mine.ann import recall_at_k

SHARD = 100_000


def generate(n: int, dim: int, dtype: np.dtype, threads: int) -> np.ndarray:
    """N mixture vectors, shard by shard (seed 0), in one array of `dtype`."""
    out = np.empty((n, dim), dtype)

    def one(lo: int) -> None:
        out[lo : lo + SHARD] = mixture_shard(min(SHARD, n - lo), dim, 0, lo // SHARD)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(0, n, SHARD)))
    return out


def search(searcher: knn.TorchSearch, vectors: np.ndarray, rows: int, k: int, batch: int, device) -> float:
    """Seconds to search the first `rows` rows in blocks (results copied back to the host, as the stage does)."""
    started = time.perf_counter()
    for lo in range(0, rows, batch):
        searcher.search(vectors[lo : min(rows, lo + batch)], k)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def recall(searcher: knn.TorchSearch, vectors: np.ndarray, rows: np.ndarray, k: int, device) -> float:
    """Overlap of the searcher's top-k with the top-k of float64 scores of the same stored vectors."""
    _, found = searcher.search(vectors[rows], k)
    queries = torch.from_numpy(vectors[rows].astype(np.float64)).to(device)
    best = None
    for lo in range(0, len(vectors), 1 << 20):
        chunk = torch.from_numpy(vectors[lo : lo + (1 << 20)].astype(np.float64)).to(device)
        scores, ids = torch.topk(queries @ chunk.T, k, dim=1)
        best = knn.running_top_k(best, (scores, ids + lo), k)
    truth = best[1].cpu().numpy()
    return recall_at_k(found, truth)


def plain_top_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.topk(scores, min(k, scores.shape[1]), dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float16", choices=["float16", "float32"])
    parser.add_argument("--query-batch", type=int, default=8192, help="as mine.query_batch")
    parser.add_argument("--paired", type=int, default=65_536, help="queries timed by both top-k methods")
    parser.add_argument("--queries", type=int, default=0, help="queries timed for the rate (0: all)")
    parser.add_argument("--check", type=int, default=1000, help="seeded rows checked against float64")
    parser.add_argument("--threads", type=int, default=16, help="generator threads")
    args = parser.parse_args()
    device = resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{torch.get_num_threads()}"
    dtype = np.dtype(args.dtype)
    print(f"device: {name}; dim={args.dim} k={args.k} dtype={dtype} query batch {args.query_batch}", flush=True)
    best_top_k = knn.top_k
    for n in args.images:
        started = time.perf_counter()
        vectors = generate(n, args.dim, dtype, args.threads)
        generated = time.perf_counter() - started
        searcher = knn.TorchSearch(args.dim, device, torch.float16 if dtype == np.float16 else torch.float32)
        started = time.perf_counter()
        for lo in range(0, n, SHARD):
            searcher.add(vectors[lo : lo + SHARD])
        searcher.search(vectors[:256], args.k + 1)  # joins the pieces; warms the kernels
        print(f"N={n:,}: generated in {generated:.1f}s, on the device in {time.perf_counter() - started:.1f}s")
        paired = min(n, args.paired)
        times: dict[str, list[float]] = {"torch.topk": [], "group top_k": []}
        for _ in range(2):
            for method, top_k in (("torch.topk", plain_top_k), ("group top_k", best_top_k)):
                knn.top_k = top_k
                times[method].append(search(searcher, vectors, paired, args.k + 1, args.query_batch, device))
        knn.top_k = best_top_k
        base = min(times["torch.topk"])
        for method, seconds in times.items():
            rate = paired / min(seconds)
            print(
                f"  {method:<12} {paired:,} queries: {', '.join(f'{s:.2f}s' for s in seconds)} "
                f"({rate:,.0f} q/s, {base / min(seconds):.2f}x torch.topk)",
                flush=True,
            )
        timed = n if args.queries == 0 else min(n, args.queries)
        seconds = search(searcher, vectors, timed, args.k + 1, args.query_batch, device)
        print(
            f"  group top_k {timed:,} queries: {seconds:.1f}s = {timed / seconds:,.0f} q/s; all {n:,}: "
            f"{seconds * n / timed:.0f}s{' (projected)' if timed < n else ''}",
            flush=True,
        )
        rows = np.sort(np.random.default_rng(0).choice(n, min(n, args.check), replace=False))
        print(
            f"  recall@{args.k + 1} (self included) on {len(rows)} rows vs float64: "
            f"{recall(searcher, vectors, rows, args.k + 1, device):.4f}"
        )
        gpu = (
            f"device peak {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB, " if device.type == "cuda" else ""
        )
        print(f"  {gpu}process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.1f} GiB")
        del searcher, vectors
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)


if __name__ == "__main__":
    main()
