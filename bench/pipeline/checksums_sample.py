"""The sample run (`csts-pipeline run --dataset sample`, demo encoders) with and without content checksums,
alternating in one process, each `run --force`; prints each run's seconds, the median ratio and, for the hashed
runs, the time spent inside the checksum code itself (hash updates, sidecars, digest look-ups, verification),
which on a shared machine is the steadier figure: wall times of identical runs vary by more than the cost.

    python bench/pipeline/checksums_sample.py [--repeats 3] [--work runs/checksums-bench]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from typer.testing import CliRunner

import csts_pipeline.pipeline.checksums as checksums
import csts_pipeline.pipeline.records as records
import csts_pipeline.pipeline.shards as shards
from csts_pipeline.cli import app

SPENT = [0.0]


def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        clock = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[0] += time.perf_counter() - clock

    return wrapper


class TimedHasher:
    def __init__(self) -> None:
        self.inner = checksums.xxhash.xxh3_64()

    @timed
    def update(self, data) -> None:
        self.inner.update(data)

    def hexdigest(self) -> str:
        return self.inner.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default="runs/checksums-bench")
    args = parser.parse_args()
    checksums.new_hasher = TimedHasher
    shards.write_sidecar = timed(shards.write_sidecar)
    hashed = (shards.wants_sidecar, timed(records.written_digest), timed(records.verify_outputs))
    off = (lambda path: False, lambda path: "", lambda folder, record: ([], 0))  # no hashing, no verifying
    runner = CliRunner()
    runner.invoke(app, ["run", "--dataset", "sample", "--out", args.work])  # the text-embedding cache, warm
    times: dict[str, list[float]] = {"none": [], "xxh3_64": []}
    for _ in range(args.repeats):
        for mode, (wants, digest, verify) in (("none", off), ("xxh3_64", hashed)):
            shards.wants_sidecar, records.written_digest, records.verify_outputs = wants, digest, verify
            SPENT[0] = 0.0
            clock = time.perf_counter()
            result = runner.invoke(app, ["run", "--dataset", "sample", "--out", args.work, "--force"])
            assert result.exit_code == 0, result.output
            times[mode].append(time.perf_counter() - clock)
            inside = f"  (checksum code {1000 * SPENT[0]:.1f} ms)" if mode != "none" else ""
            print(f"{mode:<8} {times[mode][-1]:.2f}s{inside}", flush=True)
    base, with_hash = statistics.median(times["none"]), statistics.median(times["xxh3_64"])
    print(f"none_median={base:.2f}s xxh3_median={with_hash:.2f}s ratio={with_hash / base:.4f}")


if __name__ == "__main__":
    main()
