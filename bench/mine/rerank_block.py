"""Re-ranking a query block's candidates: mine's `rerank` (pairs sorted by row, each row read and widened once a
block, a compiled kernel) against the former way (chunks of 128 queries, each chunk's rows read, widened to
float32 and gathered per query in numpy, then a batched product), on the same candidates.

    python -m bench.mine.rerank_block                                  # 1M x 512 float16 rows, 8,192 queries x 2,048
    python -m bench.mine.rerank_block --rows 10000000                  # the 10M re-ranking copy's size (10 GB of disk)
    python -m bench.mine.rerank_block --rows 10000000 --rerank-pairs 4194304    # the block in four parts

Writes a float16 .npy file of random unit rows (as mine's `VectorFile`) under --folder (kept for reruns), draws
random candidate lists, times the new way on the whole block and the former way on its first --former-queries
queries (its cost a query does not depend on the block), prints ms a query for each and the ratio, and checks
that both give the same ids and scores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from csts_pipeline.stages.mine import rerank as rerank_module  # noqa: E402
from csts_pipeline.stages.mine.rerank import StoredRows, VectorFile, rerank  # noqa: E402

FORMER_CHUNK = 128


def former_rerank(queries: np.ndarray, found: np.ndarray, stored: StoredRows, k: int) -> tuple[np.ndarray, ...]:
    """The baseline, chunk by chunk: distinct rows read, widened, gathered per query, multiplied, top k."""
    scores, ids = [], []
    for lo in range(0, len(queries), FORMER_CHUNK):
        chunk, candidates = queries[lo : lo + FORMER_CHUNK], found[lo : lo + FORMER_CHUNK]
        unique, inverse = np.unique(candidates, return_inverse=True)
        rows = np.asarray(stored.read(unique), np.float32)
        exact = np.matmul(rows[inverse.reshape(candidates.shape)], chunk[:, :, None])[:, :, 0]
        top = np.argpartition(-exact, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(exact, top, 1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, 1)
        scores.append(np.take_along_axis(exact, top, 1))
        ids.append(np.take_along_axis(candidates, top, 1))
    return np.concatenate(scores), np.concatenate(ids)


def vector_file(folder: Path, rows: int, dim: int) -> Path:
    path = folder / f"rerank-{rows}x{dim}.npy"
    if not path.exists():
        rng = np.random.default_rng(0)
        copy = VectorFile(path.with_suffix(".tmp"), rows, dim, np.float16)
        for lo in range(0, rows, 100_000):
            vectors = rng.standard_normal((min(100_000, rows - lo), dim), np.float32)
            copy.add(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
        copy.close()
        path.with_suffix(".tmp").rename(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=8192, help="the block (mine.query_batch)")
    parser.add_argument("--candidates", type=int, default=2048, help="mine.rerank x k")
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--former-queries", type=int, default=512)
    parser.add_argument("--rerank-pairs", type=int, default=None, help="pairs re-ranked at once (RERANK_PAIRS)")
    parser.add_argument("--folder", type=Path, default=Path("runs/bench-rerank"))
    args = parser.parse_args()
    if args.rerank_pairs:
        rerank_module.RERANK_PAIRS = args.rerank_pairs
    args.folder.mkdir(parents=True, exist_ok=True)
    path = vector_file(args.folder, args.rows, args.dim)
    rng = np.random.default_rng(1)
    queries = rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    found = np.sort(rng.integers(0, args.rows, (args.queries, args.candidates)), axis=1)
    with StoredRows(path) as stored:
        rerank(queries[:64], found[:64], stored, args.k)  # compiles the kernel
        started = time.perf_counter()
        scores, ids = rerank(queries, found, stored, args.k)
        block = (time.perf_counter() - started) / args.queries
        former_n = min(args.queries, args.former_queries)
        started = time.perf_counter()
        former_scores, former_ids = former_rerank(queries[:former_n], found[:former_n], stored, args.k)
        former = (time.perf_counter() - started) / former_n
    same_ids = float(np.mean(former_ids == ids[:former_n]))
    largest = float(np.abs(former_scores - scores[:former_n]).max())
    shape = f"{args.queries:,} queries x {args.candidates:,} candidates, k={args.k}"
    print(f"{args.rows:,} rows x {args.dim} float16; {shape}")
    print(f"rerank (sorted by row)  {block * 1000:7.3f} ms a query (the block of {args.queries:,})")
    print(f"former (128-query chunks) {former * 1000:5.3f} ms a query ({former_n:,} queries)")
    print(f"ratio {former / block:.2f}x; ids equal {same_ids:.4%}, largest score difference {largest:.2e}")


if __name__ == "__main__":
    main()
