"""mine: exact top-k image neighbours, expanded to candidate caption pairs.

`prepare` reads the embed output, runs the kNN search (stages.mine.knn) and writes the image pairs and the
captions of the embedded images; each unit then expands one range of image pairs into the Cartesian product of
their captions (stages.mine.pairs), one candidates shard per unit, cut at image-pair boundaries so that each
holds about `mine.candidates_per_shard` caption pairs. Schemas: pipeline.schemas.
"""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.errors import UserError
from pipeline.executor import LocalExecutor
from pipeline.manifest import Manifest
from pipeline.records import require_record
from pipeline.schemas import CANDIDATES, CAPTIONS, EMBEDDINGS, IMAGE_PAIRS
from pipeline.shards import read_shards, shard_name, write_table
from pipeline.stage import Resources, Stage, StagePlan, StageResult, Unit

log = logging.getLogger(__name__)
STAGE = "mine"
UPSTREAM = "embed"


class MineStage(Stage):
    name = STAGE
    upstream = UPSTREAM
    resources = Resources(cpus=1, gpus=0)

    def __init__(self, manifest: Manifest):
        super().__init__(manifest.work_dir)
        self.manifest = manifest
        self.config = manifest.mine

    def plan(self) -> StagePlan:
        upstream = require_record(self.work_dir / UPSTREAM, UPSTREAM)
        embedded = upstream.get("counts", {}).get("images_embedded")
        if embedded is not None and self.config.k >= embedded:
            raise UserError(
                f"mine.k={self.config.k} needs more than {self.config.k} embedded images; there are {embedded}"
            )
        params = {
            "k": self.config.k,
            "pairs": self.config.pairs,
            "candidates_per_shard": self.config.candidates_per_shard,
        }
        return StagePlan(params, {UPSTREAM: upstream["fingerprint"]})

    def setup(self) -> None:
        from pipeline.device import resolve_device
        from stages.mine.knn import require_faiss

        if self.config.knn == "faiss":
            require_faiss()
        self.device = resolve_device(self.manifest.run.device)

    def prepare(self, staging: Path, plan: StagePlan) -> list[Unit]:
        """kNN search and image pairs (deterministic, so recomputed on resume), then one unit per candidate shard."""
        from stages.mine.knn import exact_knn
        from stages.mine.pairs import CaptionIndex, candidate_shard_bounds, image_pairs

        embed_dir = self.work_dir / UPSTREAM
        embedded = read_shards(embed_dir / EMBEDDINGS, ["image_id", "embedding"])
        image_ids = embedded.column("image_id").to_numpy()
        dim = embedded.schema.field("embedding").type.list_size
        vectors = embedded.column("embedding").combine_chunks().flatten().to_numpy().reshape(-1, dim)
        all_captions = read_shards(embed_dir / CAPTIONS)
        captions = all_captions.filter(pa.array(np.isin(all_captions.column("image_id").to_numpy(), image_ids)))
        write_table(captions, staging / CAPTIONS / shard_name(0))
        self.captions = CaptionIndex.build(
            image_ids, captions.column("caption_id").to_numpy(), captions.column("image_id").to_numpy()
        )
        started = time.perf_counter()
        config = self.config
        neighbours, scores = exact_knn(vectors, config.k, self.device, config.query_batch, config.knn)
        self.knn_seconds = time.perf_counter() - started
        self.pairs = image_pairs(image_ids, neighbours, scores, config.pairs)
        write_table(self.pairs, staging / IMAGE_PAIRS / shard_name(0))
        self.image_count, self.caption_count = len(image_ids), captions.num_rows
        bounds, _ = candidate_shard_bounds(self.pairs, self.captions, config.candidates_per_shard)
        return [
            Unit(f"{CANDIDATES}/{shard_name(shard)}", {"lo": int(lo), "hi": int(hi)}, size=int(hi - lo))
            for shard, (lo, hi) in enumerate(itertools.pairwise(bounds))
        ]

    def process(self, unit: Unit, staging: Path) -> dict[str, Any]:
        from stages.mine.pairs import expand

        lo, hi = unit.payload["lo"], unit.payload["hi"]
        candidates = expand(self.pairs.slice(lo, hi - lo), self.captions)
        write_table(candidates, staging / unit.key)
        return {"image_pairs": hi - lo, "candidate_pairs": candidates.num_rows}

    def finish(self, stats: list[dict[str, Any]], staging: Path) -> StageResult:
        counts = {
            "images": self.image_count,
            "captions": self.caption_count,
            "image_pairs": self.pairs.num_rows,
            "candidate_pairs": sum(unit["candidate_pairs"] for unit in stats),
            "candidate_shards": len(stats),
        }
        extra = {"knn_seconds": round(self.knn_seconds, 3), "knn_backend": self.config.knn, "device": str(self.device)}
        return StageResult(counts, extra)


def run(manifest: Manifest, force: bool = False) -> dict:
    """Mine `<work_dir>/mine/` from `<work_dir>/embed/`."""
    return LocalExecutor().run(MineStage(manifest), force=force)
