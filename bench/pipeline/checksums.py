"""The cost of content checksums computed while writing (pipeline.checksums), XXH3-64 against BLAKE2b, each as a
ratio to a no-hash baseline measured in the same run.

A candidates-like table (the mine stage's largest output: pair ids, image and caption ids, image cosines) is
written as Parquet shards through the one atomic writer (pipeline.shards.write_table) in three modes, interleaved
and repeated, median taken: `none` (hashing switched off), `xxh3_64` and `blake2b`. Also printed: each hash's raw
throughput over the same bytes in memory. The last line reads `xxh3_ratio=<float> blake2b_ratio=<float>`.

    python bench/pipeline/checksums.py [--rows 4000000] [--shards 4] [--repeats 5]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import csts_pipeline.pipeline.checksums as checksums
import csts_pipeline.pipeline.shards as shards


def candidates(rows: int) -> pa.Table:
    rng = np.random.default_rng(0)
    first = np.sort(rng.integers(0, 2**20, rows))
    second = first + rng.integers(1, 1000, rows)
    return pa.table(
        {
            "pair_id": np.arange(rows, dtype=np.int64) * 7 + 3,
            "image_id_1": first,
            "image_id_2": second,
            "caption_id_1": first * 5 + rng.integers(0, 5, rows),
            "caption_id_2": second * 5 + rng.integers(0, 5, rows),
            "image_cosine": rng.random(rows, dtype=np.float32),
        }
    )


class Blake2b:
    def __init__(self) -> None:
        self.inner = hashlib.blake2b(digest_size=8)

    def update(self, data) -> None:
        self.inner.update(data)

    def hexdigest(self) -> str:
        return self.inner.hexdigest()


MODES = {
    "none": (lambda path: False, checksums.new_hasher),
    "xxh3_64": (checksums.wants_sidecar, xxhash.xxh3_64),
    "blake2b": (checksums.wants_sidecar, Blake2b),
}


def write_all(parts: list[pa.Table], folder: Path, mode: str) -> float:
    wants, hasher = MODES[mode]
    shards.wants_sidecar, checksums.new_hasher = wants, hasher
    clock = time.perf_counter()
    for index, part in enumerate(parts):
        shards.write_table(part, folder / shards.shard_name(index))
    return time.perf_counter() - clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    table = candidates(args.rows)
    step = -(-args.rows // args.shards)
    parts = [table.slice(i, step) for i in range(0, args.rows, step)]
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for mode in MODES:
                times[mode].append(write_all(parts, Path(tmp) / ".bench.next" / mode, mode))  # a staging folder
        base = Path(tmp) / ".bench.next" / "none"
        written = sum(path.stat().st_size for path in base.glob("part-*.parquet"))
        blob = b"".join((base / shards.shard_name(i)).read_bytes() for i in range(len(parts)))
    medians = {mode: statistics.median(values) for mode, values in times.items()}
    print(f"rows={args.rows:,} shards={len(parts)} bytes_written={written:,} repeats={args.repeats}")
    for mode, seconds in medians.items():
        print(f"{mode:<8} write {seconds:.3f}s  ({written / seconds / 1e6:.0f} MB/s)  all: {times[mode]}")
    base = medians["none"]
    for name, make in (("xxh3_64", xxhash.xxh3_64), ("blake2b", Blake2b)):
        runs = []
        for _ in range(args.repeats):
            clock = time.perf_counter()
            hasher = make()
            hasher.update(blob)
            hasher.hexdigest()
            runs.append(time.perf_counter() - clock)
        seconds = statistics.median(runs)
        print(f"{name:<8} hash alone {len(blob) / seconds / 1e9:.2f} GB/s = {100 * seconds / base:.2f}% of the write")
    print(f"xxh3_ratio={medians['xxh3_64'] / base:.4f} blake2b_ratio={medians['blake2b'] / base:.4f}")


if __name__ == "__main__":
    main()
