"""Would float16 embeddings change any keep decision? Checked on a finished filter run's real embeddings and pairs.

    python bench/filter/float16_check.py runs/bench-scale/8278     # a work folder with mine/ and filter/ done

Reads the run's cached sentence embeddings (<work>/text_embeddings/*.npy, float32) and every candidate pair,
scores them with the stage's kernel, then recomputes the cosine of every pair that reached it from the embeddings
rounded to float16 (accumulated in float64) and prints each pair whose cosine decision differs, with both values.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.pipeline.schemas import CANDIDATES
from csts_pipeline.pipeline.shards import iter_shards
from csts_pipeline.stages.filter.criteria import Criteria, score_pairs
from csts_pipeline.stages.filter.stage import FilterStage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, help="work folder holding manifest.yaml, mine/ and text_embeddings/")
    args = parser.parse_args()
    manifest = load_manifest(args.work / "manifest.yaml")
    stage = FilterStage(manifest)
    stage.setup()  # the cached embeddings: nothing is encoded when the filter has run
    criteria = Criteria.from_config(manifest.filter)
    embeddings = stage.backend.embeddings
    half = embeddings.astype(np.float16).astype(np.float64)
    low, high = criteria.bounds("simcse_cosine")
    reached = flips = pairs = 0
    worst = 0.0
    for path, candidates in iter_shards(args.work / "mine" / CANDIDATES, ["caption_id_1", "caption_id_2"]):
        first = stage.lookup.sentences(candidates.column("caption_id_1").to_numpy(), path)
        second = stage.lookup.sentences(candidates.column("caption_id_2").to_numpy(), path)
        scored = score_pairs(stage.backend, criteria, first, second)
        todo = np.flatnonzero(scored.cosine_computed)
        exact = scored.metrics["simcse_cosine"][todo]
        approx = np.einsum("ij,ij->i", half[first[todo]], half[second[todo]])
        worst = max(worst, float(np.abs(approx - exact).max(initial=0)))
        differs = np.flatnonzero(criteria.fails("simcse_cosine", exact) != criteria.fails("simcse_cosine", approx))
        for i in differs:
            a, b = first[todo[i]], second[todo[i]]
            print(f"flip: sentences {a} and {b}: float32 {exact[i]:.9f}, float16 {approx[i]:.9f}")
        pairs, reached, flips = pairs + len(first), reached + len(todo), flips + len(differs)
    print(
        f"{pairs:,} pairs, {reached:,} reached the cosine ({criteria.rule('simcse_cosine')}; bounds {low}, {high}); "
        f"{len(embeddings):,} sentences x {embeddings.shape[1]}-d; largest |float16 - float32| cosine {worst:.2e}; "
        f"decisions that differ: {flips}"
    )


if __name__ == "__main__":
    main()
