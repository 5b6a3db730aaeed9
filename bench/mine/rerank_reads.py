"""Re-ranking reads: candidates' rows through a memory map (the former way), by `preadv`, or by `StoredRows`.

    python -m bench.mine.rerank_reads                  # 2,000,000 x 512 float16 (2 GB), 128 queries x 512 candidates
    python -m bench.mine.rerank_reads --rows 10000000  # the 10M copy's size (10 GB of disk)

Writes a float16 .npy file of random rows (as mine's re-ranking copy, `VectorFile`), reads it once so that both
ways find it in the page cache, then times, alternately on the same fresh random candidate lists, one re-ranking
chunk's gather each way (StoredRows: preadv below MAP_BELOW of the rows, else the map) and prints the median of
each and their ratios to the map, and checks that all give the same rows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from csts_pipeline.stages.mine import rerank as rerank_module  # noqa: E402
from csts_pipeline.stages.mine.rerank import MAP_BELOW, StoredRows, VectorFile  # noqa: E402

RERANK_CHUNK = 128  # queries a read stands for: 128 x 512 candidates is mine's read of READ_ROWS distinct rows


def mapped_rows(path: Path, rows: np.ndarray) -> np.ndarray:
    """The baseline: map the file, gather the sorted rows, unmap (mine before StoredRows)."""
    base = np.load(path, mmap_mode="r")
    out = np.asarray(base[rows])
    del base
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--candidates", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--folder", type=Path, default=None, help="where the file goes (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        path = Path(folder) / "vectors.npy"
        copy = VectorFile(path, args.rows, args.dim, np.float16)
        rng = np.random.default_rng(0)
        for lo in range(0, args.rows, 100_000):
            copy.add(rng.standard_normal((min(100_000, args.rows - lo), args.dim), np.float32))
        copy.close()
        path.read_bytes() if args.rows * args.dim * 2 < 4 * 1024**3 else None  # warm the page cache
        times: dict[str, list[float]] = {"memory map": [], "preadv": [], "StoredRows": []}
        with StoredRows(path) as stored:
            for _ in range(args.repeats):
                rows = np.unique(rng.integers(0, args.rows, RERANK_CHUNK * args.candidates))
                started = time.perf_counter()
                mapped = mapped_rows(path, rows)
                times["memory map"].append(time.perf_counter() - started)
                for name, share in (("preadv", 1.0), ("StoredRows", MAP_BELOW)):
                    rerank_module.MAP_BELOW = share
                    started = time.perf_counter()
                    read = stored.read(rows)
                    times[name].append(time.perf_counter() - started)
                    assert np.array_equal(mapped, read)
    per_query = {name: statistics.median(values) / RERANK_CHUNK * 1000 for name, values in times.items()}
    print(f"{args.rows:,} rows x {args.dim} float16, {RERANK_CHUNK} queries x {args.candidates} candidates a chunk")
    for name, ms in per_query.items():
        print(f"{name:<11} {ms:7.3f} ms a query (median of {args.repeats})")
    for name in ("preadv", "StoredRows"):
        print(f"{name} is {per_query['memory map'] / per_query[name]:.2f}x the memory map's speed")
    print(
        f"(StoredRows maps from {MAP_BELOW:.0%} of the rows on: here {RERANK_CHUNK * args.candidates / args.rows:.1%})"
    )


if __name__ == "__main__":
    main()
