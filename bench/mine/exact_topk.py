"""Exact top-k image-neighbour search: FAISS and torch.mm+topk against a brute-force numpy baseline.

    python bench/mine/exact_topk.py                       # N in {10k, 83k} x 512-d, k=64, on this machine's device
    python bench/mine/exact_topk.py --sizes 10000 --k 64 --device cuda

Every method is timed in the same run on the same vectors and checked against the baseline's neighbours.
Prints one line per (N, method) with seconds, queries/s and the speed-up over the baseline.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from csts_pipeline.pipeline.device import resolve_device
from csts_pipeline.stages.mine.knn import exact_knn


def brute_force_numpy(vectors: np.ndarray, k: int, query_batch: int = 4096) -> np.ndarray:
    """The baseline: a block of full similarity rows, argpartition, sort the k best, self excluded."""
    n = len(vectors)
    neighbours = np.empty((n, k), np.int64)
    for lo in range(0, n, query_batch):
        hi = min(n, lo + query_batch)
        sims = vectors[lo:hi] @ vectors.T
        sims[np.arange(hi - lo), np.arange(lo, hi)] = -np.inf
        top = np.argpartition(-sims, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1, kind="stable")
        neighbours[lo:hi] = np.take_along_axis(top, order, axis=1)
    return neighbours


def clustered_unit_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """Image-embedding-like data: points around 1,000 centres, L2-normalised."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((1000, dim)).astype(np.float32)
    vectors = centres[rng.integers(0, 1000, n)] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 82_783])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{torch.get_num_threads()}"
    print(f"device: {name}; dim={args.dim} k={args.k}")
    for n in args.sizes:
        vectors = clustered_unit_vectors(n, args.dim)
        started = time.perf_counter()
        expected = brute_force_numpy(vectors, args.k)
        baseline = time.perf_counter() - started
        print(f"N={n:>6} numpy-brute-force  {baseline:8.2f}s {n / baseline:10.0f} q/s  1.00x (baseline)")
        for backend in ("faiss", "torch"):
            exact_knn(vectors[:2048], args.k, device, backend=backend)  # warm-up: kernels, allocator
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            neighbours, _ = exact_knn(vectors, args.k, device, backend=backend)
            seconds = time.perf_counter() - started
            agree = float(np.mean(np.sort(neighbours, axis=1) == np.sort(expected, axis=1)))
            print(
                f"N={n:>6} {backend + '-' + device.type:<18} {seconds:8.2f}s {n / seconds:10.0f} q/s "
                f"{baseline / seconds:5.2f}x  neighbours equal to baseline: {agree:.4%}"
            )


if __name__ == "__main__":
    main()
