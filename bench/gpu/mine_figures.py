"""mine's GPU figures at N synthetic images (bench/gpu/run.sh runs it once per N, in its own process, so the host peak
is this search's): today's exact torch search (the baseline, timed on a share of the queries and projected) against the
approximate search the memory budget chooses on this device, with recall on held-out queries.

    python -m bench.gpu.mine_figures --images 1000000 --out /tmp/mine-1m.json
    python -m bench.gpu.mine_figures --images 3000 --dim 32 --device cpu --out /tmp/mine.json   # what the dry run does

Vectors: bench.mine.hard_data's mixture (unit length), held in --dtype. The approximate path is the one mine takes
(stages.mine.budget.plan_index with this device's Accelerator; the torch IVF, stages.mine.torch_ivf, unless
FAISS's GPU build is installed): k-means on the seeded sample, lists filled piece by piece, nprobe raised by
mine's own `climb` until recall@k on --recall-sample base rows reaches the target (their exact top-k on the
device), then every row searched in list order in blocks of --query-batch, as mine does, until --search-seconds
(then projected). Recall@k on --held-out queries never added to the index, against their exact top-k.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mine.hard_data import HOLDOUT_SHARD, mixture_shard
from csts_pipeline.pipeline.device import resolve_device
from csts_pipeline.pipeline.manifest import MineConfig
from csts_pipeline.stages.mine.ann import climb, recall_at_k
from csts_pipeline.stages.mine.budget import GIB, Accelerator, find_accelerator, plan_index, training_rows
from csts_pipeline.stages.mine.knn import TorchSearch, drop_self
from csts_pipeline.stages.mine.torch_ivf import TorchIVF

SHARD = 100_000


def generate(n: int, dim: int, dtype: np.dtype, threads: int, shard_seed: int = 0) -> np.ndarray:
    """N mixture vectors, shard by shard (seed 0), in one array of `dtype`; `shard_seed` offsets the shards."""
    out = np.empty((n, dim), dtype)

    def one(lo: int) -> None:
        out[lo : lo + SHARD] = mixture_shard(min(SHARD, n - lo), dim, 0, shard_seed + lo // SHARD)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(0, n, SHARD)))
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def exact_baseline(vectors: np.ndarray, k: int, batch: int, queries: int, device: torch.device, dtype) -> dict:
    """Today's `mine.knn: torch` exact search: the first `queries` rows timed, projected to all N."""
    searcher = TorchSearch(vectors.shape[1], device, dtype)
    for lo in range(0, len(vectors), SHARD):
        searcher.add(vectors[lo : lo + SHARD])
    searcher.search(vectors[:256], k + 1)  # joins the pieces; warms the kernels
    _sync(device)
    timed = min(len(vectors), queries)
    started = time.perf_counter()
    for lo in range(0, timed, batch):
        searcher.search(vectors[lo : min(timed, lo + batch)], k + 1)
    _sync(device)
    seconds = time.perf_counter() - started
    del searcher
    return {
        "queries_timed": timed,
        "seconds": round(seconds, 3),
        "projected_seconds": round(seconds * len(vectors) / timed, 1),
    }


def approximate(vectors: np.ndarray, held_out: np.ndarray, args, device: torch.device, accelerator) -> dict:
    """The index the budget chooses, built, tuned and searched as mine does; recall on held-out queries."""
    config = MineConfig(index="ivf", k=args.k, recall_target=args.recall_target, query_batch=args.query_batch)
    n, dim = vectors.shape
    plan = plan_index(config, n, dim, accelerator=accelerator)
    out: dict = {"plan": plan.reason, "kind": plan.kind, "backend": plan.backend, "lists": plan.lists}
    if (plan.kind, plan.backend) != ("ivf", "torch"):
        return out | {"skipped": "the budget chose no torch IVF on this device (see plan)"}
    dtype = torch.float16 if vectors.dtype == np.float16 else torch.float32
    started = time.perf_counter()
    ivf = TorchIVF(dim, plan.lists, device, dtype, seed=0)
    sample = np.sort(np.random.default_rng(0).choice(n, training_rows("ivf", n, plan.lists), replace=False))
    ivf.train(vectors[sample].astype(np.float32))
    for lo in range(0, n, SHARD):
        ivf.add(vectors[lo : lo + SHARD])
    order = ivf.rows_by_list()
    _sync(device)
    out["build_seconds"] = round(time.perf_counter() - started, 2)
    out |= tune(ivf, vectors, args)
    out |= search_all(ivf, order, args, device)
    truth = ivf.exact_search(held_out, args.k)[1]
    out["held_out_recall"] = round(recall_at_k(ivf.search(held_out, args.k)[1], truth), 4)
    out["held_out_queries"] = len(held_out)
    return out


def tune(ivf: TorchIVF, vectors: np.ndarray, args) -> dict:
    """nprobe by mine's `climb` on seeded base rows (self excluded), their exact top-k on the device."""
    started = time.perf_counter()
    rows = np.sort(np.random.default_rng(1).choice(len(vectors), min(len(vectors), args.recall_sample), False))
    queries = vectors[rows]
    exact_scores, exact_found = ivf.exact_search(queries, args.k + 1)
    truth = drop_self(exact_found, exact_scores, rows, args.k)[0]
    tried = {}

    def measure(nprobe: int) -> float:
        ivf.set_parameter("nprobe", nprobe)
        scores, found = ivf.search(queries, args.k + 1)
        tried[nprobe] = round(recall_at_k(drop_self(found, scores, rows, args.k)[0], truth), 4)
        return tried[nprobe]

    nprobe, recall, stalled = climb(measure, 1, ivf.nlist, args.recall_target)
    ivf.set_parameter("nprobe", nprobe)
    return {
        "nprobe": nprobe,
        "sample_recall": round(recall, 4),
        "stalled": stalled,
        "tried": tried,
        "tune_seconds": round(time.perf_counter() - started, 2),
    }


def search_all(ivf: TorchIVF, order: np.ndarray, args, device: torch.device) -> dict:
    """Every row's top-k+1 in list order, blocks of query_batch, until --search-seconds; then projected."""
    started, searched = time.perf_counter(), 0
    for lo in range(0, len(order), args.query_batch):
        rows = np.sort(order[lo : lo + args.query_batch])
        ivf.search(ivf.read(rows), args.k + 1)
        searched += len(rows)
        if time.perf_counter() - started > args.search_seconds:
            break
    _sync(device)
    seconds = time.perf_counter() - started
    projected = seconds * len(order) / searched
    return {"searched": searched, "search_seconds": round(seconds, 2), "search_projected_seconds": round(projected, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, required=True)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float16", choices=["float16", "float32"])
    parser.add_argument("--query-batch", type=int, default=8192)
    parser.add_argument("--exact-queries", type=int, default=65_536, help="baseline: queries timed, then projected")
    parser.add_argument("--recall-target", type=float, default=0.95)
    parser.add_argument("--recall-sample", type=int, default=1000)
    parser.add_argument("--held-out", type=int, default=1000)
    parser.add_argument("--search-seconds", type=float, default=240, help="then the rest is projected")
    parser.add_argument("--gpu-budget-gib", type=float, default=None, help="default: 90%% of the device")
    parser.add_argument("--threads", type=int, default=16, help="generator threads")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    device = resolve_device(args.device)
    dtype = np.dtype(args.dtype)
    started = time.perf_counter()
    vectors = generate(args.images, args.dim, dtype, args.threads)
    held_out = generate(args.held_out, args.dim, np.dtype(np.float32), 1, shard_seed=HOLDOUT_SHARD)
    result: dict = {"images": args.images, "dim": args.dim, "k": args.k, "dtype": args.dtype, "device": str(device)}
    result["generate_seconds"] = round(time.perf_counter() - started, 1)
    torch_dtype = torch.float16 if dtype == np.float16 else torch.float32
    result["exact_baseline"] = exact_baseline(
        vectors, args.k, args.query_batch, args.exact_queries, device, torch_dtype
    )
    if device.type == "cuda":
        result["exact_baseline"]["gpu_peak_gib"] = round(torch.cuda.max_memory_allocated(device) / GIB, 2)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        config = MineConfig(gpu_memory_budget=args.gpu_budget_gib)
        accelerator = find_accelerator(config, str(device), dtype.itemsize)
    else:  # the dry run: the torch IVF on the CPU device, as a GPU without faiss-gpu would run it
        accelerator = Accelerator(int((args.gpu_budget_gib or 8) * GIB), "torch", dtype.itemsize)
    result["approximate"] = approximate(vectors, held_out, args, device, accelerator)
    if device.type == "cuda":
        result["approximate"]["gpu_peak_gib"] = round(torch.cuda.max_memory_allocated(device) / GIB, 2)
    result["host_peak_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
