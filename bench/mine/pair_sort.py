"""Ordering a query block's (query, candidate) pairs by row for the re-ranking: `rerank.pairs_by_row` (a bucket
sort, numba) against numpy's stable argsort, which it replaced; the same order is checked.

    python -m bench.mine.pair_sort --rows 10000000 --distinct 1000000

A block of `--queries` x `--candidates` candidate ids drawn from `--distinct` rows of `--rows` (1 in 97 is -1, no
candidate), timed alternately `--repeats` times, medians.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from csts_pipeline.stages.mine.rerank import pairs_by_row


def argsort_order(flat: np.ndarray) -> np.ndarray:
    valid = flat >= 0
    return np.argsort(np.where(valid, flat, np.iinfo(np.int64).max), kind="stable")[: int(valid.sum())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--distinct", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=8192)
    parser.add_argument("--candidates", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    rows = rng.choice(args.rows, args.distinct, replace=False)
    flat = rows[rng.integers(0, args.distinct, args.queries * args.candidates)]
    flat[::97] = -1
    pairs_by_row(flat[:1000])  # compiles, untimed
    times: dict[str, list[float]] = {"bucket sort": [], "stable argsort": []}
    for _ in range(args.repeats):
        for name, order_of in (("bucket sort", pairs_by_row), ("stable argsort", argsort_order)):
            started = time.perf_counter()
            order = order_of(flat)
            times[name].append(time.perf_counter() - started)
            if name == "bucket sort":
                ours = order
        assert (ours == order).all(), "the bucket sort's order differs from the stable argsort's"
    bucket, argsort = np.median(times["bucket sort"]), np.median(times["stable argsort"])
    print(f"{len(flat):,} pairs: bucket sort {bucket:.3f} s, stable argsort {argsort:.3f} s ({argsort / bucket:.1f}x)")


if __name__ == "__main__":
    main()
