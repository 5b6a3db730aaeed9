"""Query blocks in row order against blocks taken list by list (mine's order for a compressed index), on an index
a mine run saved: search and re-ranking milliseconds a query, and the distinct candidate rows a block reads.

    python -m bench.mine.query_order runs/bench-scale/10000000/.mine.next/_knn --blocks 3

The folder holds `index.faiss`, `searcher.json` and `vectors.npy` (a mine run killed or still searching keeps
them). Each round times one block of `--batch` consecutive rows (from a seeded place) and one block of the list
order (`ann.rows_by_list`, from a seeded place), alternating, at the record's nprobe and candidates, after an
untimed block that compiles the re-ranking kernel.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from csts_pipeline.pipeline.records import read_json
from csts_pipeline.stages.mine.ann import rows_by_list, set_tuned
from csts_pipeline.stages.mine.rerank import StoredRows, rerank


def timed_block(index, stored: StoredRows, vectors: Path, rows: np.ndarray, candidates: int) -> tuple[float, ...]:
    """(search ms a query, re-ranking ms a query, distinct candidate rows) of one block of `rows`."""
    queries = np.asarray(stored.read(np.sort(rows)), np.float32)
    started = time.perf_counter()
    _, found = index.search(queries, candidates)
    searched = time.perf_counter()
    rerank(queries, found, vectors, 65)
    ranked = time.perf_counter()
    per_query = 1000 / len(rows)
    return (searched - started) * per_query, (ranked - searched) * per_query, len(np.unique(found))


def main() -> None:
    import faiss

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--blocks", type=int, default=3)
    args = parser.parse_args()

    saved = read_json(args.folder / "searcher.json")
    index = faiss.read_index(str(args.folder / "index.faiss"))
    set_tuned(index, saved["record"])
    vectors, candidates = args.folder / "vectors.npy", saved["rerank_candidates"]
    order = rows_by_list(index)
    rng = np.random.default_rng(0)
    totals: dict[str, list[float]] = {"row order": [], "list order": []}
    with StoredRows(vectors) as stored:
        timed_block(index, stored, vectors, order[:64], candidates)  # compiles the re-ranking kernel, untimed
        for _ in range(args.blocks):
            for name in totals:
                lo = int(rng.integers(0, len(order) - args.batch))
                rows = np.arange(lo, lo + args.batch) if name == "row order" else order[lo : lo + args.batch]
                search, ranking, distinct = timed_block(index, stored, vectors, rows, candidates)
                totals[name].append(search + ranking)
                print(f"{name:<10}: search {search:.3f} ms/query, re-ranking {ranking:.3f}, {distinct:,} rows read")
    ratio = np.mean(totals["row order"]) / np.mean(totals["list order"])
    print(f"list order is {ratio:.2f}x row order (search and re-ranking, mean of {args.blocks} blocks each)")


if __name__ == "__main__":
    main()
