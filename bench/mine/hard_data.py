"""Synthetic embeddings as hard for IVF as real ones, and the recall-at-nprobe curve that checks it.

    python -m bench.mine.hard_data --sizes 25000 100000            # the generator's curve
    python -m bench.mine.hard_data --sizes 25000 --real            # and MiniLM on COCO val2017 captions (../shared)

The old generator (`bench.mine.scale.clustered_shard`, 1,000 tight clusters) lines its clusters up with the IVF lists,
so nprobe 1 gives recall 0.98 from 100,000 images on (/work/shared/notes/ann-recall-reference.md). Real embeddings
are continuous and uneven. `mixture_shard` draws from a mixture of `CENTRES` (100,000) centres whose positions
follow a decaying spectrum (variance of direction i about i^-1.2, randomly rotated), with uneven popularity
(Zipf-like weights) and spreads (log-normal), plus per-point noise on the same spectrum: neighbours come from many
nearby centres, with no scale at which the data falls into separate clusters. The curve: IVF-Flat, about sqrt(N)
lists trained on up to 64 points each, recall@64 against the exact top-64 of 1,000 seeded queries, twice: queries
that are rows of the base (self excluded) and 1,000 independent queries from the same source never added to the
index (`held-out` rows: the generator's shard HOLDOUT_SHARD, or captions left out of the real subset).
"""

from __future__ import annotations

import argparse
import functools
import math
import time

import numpy as np

CENTRES = 100_000
DECAY = 1.2  # spectrum: variance of the i-th principal direction about (i + 1) ** -DECAY
NOISE = 0.3  # point noise relative to the spread of the centres
SPREAD_SIGMA = 0.5  # log-normal spread of each centre's own noise scale
PROBES = (1, 2, 4, 8, 16, 32, 64)
HOLDOUT_SHARD = 10**9  # the generator's shard of held-out queries: never a shard of a base


@functools.lru_cache(maxsize=2)
def _mixture(dim: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(centres, cumulative weights, spreads, spectrum x rotation) of the seeded mixture."""
    rng = np.random.default_rng([seed, 7])
    scale = (np.arange(1, dim + 1, dtype=np.float32) ** (-DECAY / 2)).astype(np.float32)
    rotation = np.linalg.qr(rng.standard_normal((dim, dim)))[0].astype(np.float32)
    shape = scale[:, None] * rotation  # row i of the white noise scaled by the spectrum, then rotated
    centres = rng.standard_normal((CENTRES, dim), dtype=np.float32) @ shape
    weights = 1.0 / np.arange(1, CENTRES + 1) ** 0.7
    cumulative = np.cumsum(rng.permutation(weights))
    spreads = NOISE * rng.lognormal(0.0, SPREAD_SIGMA, CENTRES).astype(np.float32)
    return centres, cumulative / cumulative[-1], spreads, shape


def mixture_shard(n: int, dim: int, seed: int, shard: int) -> np.ndarray:
    """`n` unit vectors of the seeded mixture; shard `shard` of a corpus generated shard by shard."""
    centres, cumulative, spreads, shape = _mixture(dim, seed)
    rng = np.random.default_rng([seed, shard])
    pick = np.minimum(np.searchsorted(cumulative, rng.random(n)), CENTRES - 1)
    noise = rng.standard_normal((n, dim), dtype=np.float32) @ shape
    vectors = centres[pick] + spreads[pick, None] * noise
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def recall_curve(
    vectors: np.ndarray, k: int = 64, queries: int = 1000, seed: int = 0, held_out: np.ndarray | None = None
) -> tuple[dict[int, float], dict[int, float]]:
    """recall@k of IVF-Flat (about sqrt(N) lists) at each nprobe of PROBES: on seeded rows of the base (self
    excluded), and on `held_out` queries that are not in the base (empty when none are given)."""
    import faiss

    from csts_pipeline.stages.mine.ann import exact_top_k, recall_at_k
    from csts_pipeline.stages.mine.knn import drop_self

    n, dim = vectors.shape
    lists = max(1, min(round(math.sqrt(n)), n // 39))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, lists, faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(seed)
    index.train(vectors[rng.choice(n, min(n, 64 * lists), replace=False)])
    index.add(vectors)
    rows = np.sort(rng.choice(n, min(n, queries), replace=False))
    truth = exact_top_k(_InMemory(vectors), rows, k)
    held_truth = exact_top_k(_InMemory(vectors), None, k, queries=held_out) if held_out is not None else None
    curve, independent = {}, {}
    for nprobe in PROBES:
        index.nprobe = nprobe
        scores, found = index.search(vectors[rows], k + 1)
        curve[nprobe] = round(recall_at_k(drop_self(found, scores, rows, k)[0], truth), 3)
        if held_out is not None:
            independent[nprobe] = round(recall_at_k(index.search(held_out, k)[1], held_truth), 3)
    return curve, independent


class _InMemory:
    """The `EmbeddingShards` reading interface over one array (for `exact_top_k`)."""

    def __init__(self, vectors: np.ndarray):
        self.vectors = vectors

    def rows(self, rows: np.ndarray) -> np.ndarray:
        return self.vectors[rows]

    def blocks(self, size: int):
        for lo in range(0, len(self.vectors), size):
            yield lo, self.vectors[lo : lo + size]


def coco_caption_vectors() -> np.ndarray:
    """MiniLM (the packaged all-MiniLM-L6-v2) embeddings of the COCO val2017 captions, normalised."""
    import torch

    from bench.shared_data import COCO_VAL
    from csts_pipeline.pipeline.text_encoder import load_text_encoder
    from csts_pipeline.stages.embed.readers.datasets import read_coco

    captions = read_coco(COCO_VAL).captions
    model = load_text_encoder("packaged:all-MiniLM-L6-v2", "model", torch.device("cpu"))
    vectors = np.asarray(model.encode(list(captions), batch_size=256), np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[25_000, 100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--real", action="store_true", help="also the COCO captions' curve (needs ../shared)")
    parser.add_argument("--held-out", type=int, default=1000, help="independent queries, never added to the index")
    args = parser.parse_args()
    print("data                   N       " + "  ".join(f"np{p:<4}" for p in PROBES), flush=True)
    if args.real:
        real = coco_caption_vectors()
        for n in [size for size in args.sizes if size + args.held_out <= len(real)]:
            picked = np.random.default_rng(1).choice(len(real), n + args.held_out, replace=False)
            curves = recall_curve(real[picked[:n]], held_out=real[picked[n:]])
            _print_curves("real", n, curves)
    for n in args.sizes:
        started = time.perf_counter()
        vectors = np.concatenate(
            [mixture_shard(min(10_000, n - lo), args.dim, 0, s) for s, lo in enumerate(range(0, n, 10_000))]
        )
        curves = recall_curve(vectors, held_out=mixture_shard(args.held_out, args.dim, 0, HOLDOUT_SHARD))
        _print_curves("mixture", n, curves, f" ({time.perf_counter() - started:.0f}s)")


def _print_curves(data: str, n: int, curves: tuple[dict[int, float], dict[int, float]], tail: str = "") -> None:
    for name, curve in zip(("sample rows", "held-out"), curves):
        print(f"{data:<7} {name:<11} {n:>10,}  " + "  ".join(f"{r:.3f} " for r in curve.values()) + tail, flush=True)


if __name__ == "__main__":
    main()
