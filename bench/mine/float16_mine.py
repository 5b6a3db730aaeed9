"""Would float16 image embeddings change mine's output? The exact top-k in float32 and from float16-rounded vectors.

    python -m bench.mine.float16_mine --images 25000            # the mixture data of bench.mine.hard_data, 512-d, k=64

Prints the share of (image, neighbour) pairs that enter or leave the top-k lists when the stored vectors are
float16 (each is a candidate image pair gained or lost, so every keep decision on its captions), and the largest
change of a neighbour's cosine.
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.mine.hard_data import mixture_shard
from csts_pipeline.stages.mine.knn import exact_knn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=25_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--k", type=int, default=64)
    args = parser.parse_args()
    n = args.images
    vectors = np.concatenate(
        [mixture_shard(min(10_000, n - lo), args.dim, 0, s) for s, lo in enumerate(range(0, n, 10_000))]
    )
    full, full_scores = exact_knn(vectors, args.k)
    half, half_scores = exact_knn(vectors.astype(np.float16).astype(np.float32), args.k)
    changed = sum(len(set(a) - set(b)) for a, b in zip(full.tolist(), half.tolist()))
    print(
        f"{n:,} images, k={args.k}: {changed:,} of {n * args.k:,} neighbour pairs differ "
        f"({changed / (n * args.k):.4%}); largest cosine change {np.abs(full_scores - half_scores).max():.2e}"
    )


if __name__ == "__main__":
    main()
