"""The filter stage's pair pass alone, on a finished run: read every candidates shard, score, write kept shards.

    python bench/filter/filter_pass.py runs/bench-scale/8278 [--repeats 3]

Sets the stage up once (cached embeddings: nothing is encoded when the filter has run there), then times
`FilterStage.process_many` over all of mine's shards into a scratch staging folder, as the executor calls it
(Parquet read, the compiled kernels, the funnel, Parquet write). Prints the median.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.stages.filter.stage import FilterStage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, help="work folder holding manifest.yaml, mine/ and text_embeddings/")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    stage = FilterStage(load_manifest(args.work / "manifest.yaml"))
    units = stage.plan().units
    started = time.perf_counter()
    stage.setup()
    setup = time.perf_counter() - started
    pairs = sum(unit.size for unit in units)
    staging = Path(tempfile.mkdtemp(prefix="filter-pass-"))
    try:
        for _ in stage.process_many(units[:1], staging):  # compile the kernels outside the timing
            pass
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            for _ in stage.process_many(units, staging):
                pass
            times.append(time.perf_counter() - started)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    seconds = statistics.median(times)
    print(f"setup {setup:.1f}s; {len(units)} shards, {pairs:,} pairs; runs: {', '.join(f'{t:.2f}s' for t in times)}")
    print(f"pair_pass_seconds={seconds:.3f} pairs_per_s={pairs / seconds:.1f}")


if __name__ == "__main__":
    main()
