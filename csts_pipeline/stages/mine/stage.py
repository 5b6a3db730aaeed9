"""mine: top-k image neighbours (exact, or approximate with measured recall), expanded to candidate caption pairs.

`prepare` streams the embed output: it copies the captions of the embedded images, builds the searcher (exact:
stages.mine.knn; IVF or HNSW tuned to `mine.recall_target`: stages.mine.ann), searches query block by query block
(under the Ray executor an exact search runs one Ray task per block, the base vectors shared through the object
store: `ClusterStage.tasks`) and writes one image-pairs shard per block (stages.mine.search). Each unit then expands
one range of image pairs into the Cartesian product of their captions (stages.mine.pairs), one candidates shard
per unit, cut at image-pair boundaries so that each holds about `mine.candidates_per_shard` caption pairs.
Schemas: pipeline.schemas.
"""

from __future__ import annotations

import logging
import resource
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from csts_pipeline.pipeline.cluster import ClusterStage
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.executor import LocalExecutor
from csts_pipeline.pipeline.manifest import Manifest
from csts_pipeline.pipeline.records import require_record
from csts_pipeline.pipeline.schemas import CAPTIONS, CAPTIONS_SCHEMA, EMBEDDINGS, IMAGE_PAIRS
from csts_pipeline.pipeline.shards import list_shards, read_table, shard_name, write_atomic, write_table
from csts_pipeline.pipeline.stage import Resources, Stage, StagePlan, StageResult, Unit
from csts_pipeline.stages.embed import SPEC as EMBED
from csts_pipeline.stages.mine import SPEC
from csts_pipeline.stages.mine.budget import COMPRESSED, GIB, base_on_gpu, find_accelerator, plan_index

if TYPE_CHECKING:
    from csts_pipeline.stages.mine.pairs import CaptionIndex
    from csts_pipeline.stages.mine.search import Prepared
    from csts_pipeline.stages.mine.vectors import EmbeddingShards

log = logging.getLogger(__name__)
UPSTREAM = EMBED.name  # the folder it reads


class MineStage(ClusterStage):
    name = SPEC.name
    upstream = SPEC.upstream
    resources = Resources(cpus=1, gpus=0)

    def __init__(self, manifest: Manifest):
        super().__init__(manifest.work_dir)
        self.manifest = manifest
        self.config = manifest.mine

    def upstream_stage(self) -> Stage:
        """The upstream stage under this manifest (pipeline.executor.stale_reason checks its output against it)."""
        return EMBED.load()(self.manifest)

    def plan(self) -> StagePlan:
        upstream = require_record(self.work_dir / UPSTREAM, UPSTREAM)
        embedded = upstream.get("counts", {}).get("images_embedded")
        if embedded is None:  # a record without the count: the shards' footers say it
            embedded = sum(
                pq.read_metadata(path).num_rows for path in list_shards(self.work_dir / UPSTREAM / EMBEDDINGS)
            )
        if self.config.k >= embedded:  # the one check of k: exact and approximate searches alike rely on it
            raise UserError(
                f"mine.k={self.config.k} needs more than {self.config.k} embedded images; there are {embedded}"
            )
        config = self.config
        params = {"k": config.k, "pairs": config.pairs, "candidates_per_shard": config.candidates_per_shard}
        dim, itemsize = embedding_shape(self.work_dir / UPSTREAM / EMBEDDINGS)
        device, n = self.manifest.run.device, embedded or 0
        approximate = config.index == "ivf" or (config.index == "auto" and n >= config.exact_below)
        accelerator = find_accelerator(config, device, itemsize) if approximate else None  # torch only then
        self.plan_ = plan_index(config, n, dim, base_on_gpu(config, device), accelerator)
        self.index = self.plan_.kind
        if self.index != "exact":  # exact runs keep the fingerprint they had before approximate search existed
            params |= {"index": self.index, "recall_target": config.recall_target, "seed": config.seed}
            params |= {"hnsw_m": config.hnsw_m} if self.index == "hnsw" else {"ivf_lists": config.ivf_lists}
        if self.index in COMPRESSED:
            params |= {"factory": self.plan_.factory, "rerank": config.rerank}
        if self.plan_.backend == "torch":  # its own k-means: other lists than FAISS's, so other pairs
            params["ivf_backend"] = "torch"
        if config.by == "text":
            text = self.manifest.filter
            params |= {"by": "text", "text_encoder": text.text_encoder, "text_pooling": text.text_pooling}
        return StagePlan(params, {UPSTREAM: upstream["fingerprint"]})

    def setup(self) -> None:
        from csts_pipeline.pipeline.device import resolve_device
        from csts_pipeline.stages.mine.knn import require_faiss

        plan = getattr(self, "plan_", None)
        index, backend = (plan.kind, plan.backend) if plan is not None else (self.config.index, "faiss")
        if (index == "exact" and self.config.knn == "faiss") or (index != "exact" and backend != "torch"):
            require_faiss()
        self.device = resolve_device(self.manifest.run.device)
        if self.config.by == "text":
            from csts_pipeline.pipeline.text_encoder import load_text_encoder

            text = self.manifest.filter
            self.text_model = load_text_encoder(text.text_encoder, text.text_pooling, self.device)

    def prepare(self, staging: Path, plan: StagePlan) -> list[Unit]:
        """Search and image pairs, streamed block by block, then one unit per candidate shard. A run killed after
        the image pairs were written resumes from them; one killed mid-search, from its finished blocks."""
        from csts_pipeline.stages.mine.search import KNN_DIR, load_prepared, save_prepared
        from csts_pipeline.stages.mine.vectors import EmbeddingShards

        embed_dir = self.work_dir / UPSTREAM
        shards = EmbeddingShards(embed_dir / EMBEDDINGS)
        image_ids = shards.image_ids
        self.captions, self.caption_count = copy_captions(embed_dir / CAPTIONS, staging / CAPTIONS, image_ids)
        prepared = load_prepared(staging)
        if prepared is None:
            prepared = self._search_and_pair(shards, staging)
            save_prepared(staging, prepared)
        shutil.rmtree(staging / KNN_DIR, ignore_errors=True)
        shutil.rmtree(staging / "_text", ignore_errors=True)
        self.search, self.knn_seconds, self.pair_count = prepared.search, prepared.knn_seconds, prepared.image_pairs
        self.image_count = len(image_ids)
        self._block: tuple[int, pa.Table] | None = None
        return prepared.units

    def _search_and_pair(self, shards: EmbeddingShards, staging: Path) -> Prepared:
        """Every image's top-k (by its caption vectors with `mine.by: text`), written as image-pairs shards."""
        from csts_pipeline.stages.mine.search import KNN_DIR, Prepared, write_pairs

        image_ids = shards.image_ids
        if self.config.by == "text":
            from csts_pipeline.stages.mine.text import TEXT_DIR, caption_vectors
            from csts_pipeline.stages.mine.vectors import EmbeddingShards

            batch = self.manifest.filter.text_batch_size
            copied = staging / CAPTIONS / shard_name(0)
            shards = EmbeddingShards(caption_vectors(copied, image_ids, self.text_model, batch, staging / TEXT_DIR))
        started = time.perf_counter()
        neighbours, scores = self._search(shards, staging / KNN_DIR)
        knn_seconds = time.perf_counter() - started
        units, pair_count = write_pairs(
            neighbours, scores, image_ids=image_ids, captions=self.captions, config=self.config, staging=staging
        )
        return Prepared(units, pair_count, self.search, knn_seconds)

    def _search(self, shards: EmbeddingShards, folder: Path) -> tuple[np.ndarray, np.ndarray]:
        """Every row's top-k, block by block: here, or as tasks of the executor's `tasks` for an exact search
        (the base vectors shared, one task per query block). Here, a run killed mid-search resumes: the built
        index and the finished blocks wait in `folder` (stages.mine.search `saved_searcher`, `store_knn`)."""
        from csts_pipeline.stages.mine.search import (
            build_searcher,
            finished_blocks,
            local_blocks,
            saved_searcher,
            search_all,
            search_seconds,
            store_knn,
            task_blocks,
        )

        config, n = self.config, len(shards)
        if self.tasks.distributed and config.parts > 1 and self.index != "hnsw" and self.plan_.backend != "torch":
            from csts_pipeline.stages.mine.base_split import split_searcher

            searcher, self.search = split_searcher(self.plan_, shards, config, self.tasks, folder)
            try:
                blocks = local_blocks(searcher, shards, config.k, config.query_batch)
                return store_knn(blocks, n, config.k, config.query_batch, folder)
            finally:
                searcher.close()
        if self.index == "exact" and self.tasks.distributed:
            self.search = {"index": "exact", "knn_backend": config.knn, "query_blocks": -(-n // config.query_batch)}
            return store_knn(task_blocks(self.tasks, shards, config), n, config.k, config.query_batch, folder)
        searcher, self.search = saved_searcher(
            folder, lambda: build_searcher(self.plan_, shards, config, self.device, folder)
        )
        done = finished_blocks(folder, config.query_batch)  # an interrupted run's blocks are not searched again
        found = search_all(searcher, shards, k=config.k, batch=config.query_batch, folder=folder, skip=done)
        self.search = self.search | {"search_seconds": search_seconds(folder), "blocks_resumed": len(done)}
        return found

    def process(self, unit: Unit, staging: Path) -> dict[str, Any]:
        from csts_pipeline.stages.mine.pairs import expand

        block, lo, hi = unit.payload["pairs"], unit.payload["lo"], unit.payload["hi"]
        if self._block is None or self._block[0] != block:
            self._block = (block, read_table(staging / IMAGE_PAIRS / shard_name(block)))
        candidates = expand(self._block[1].slice(lo, hi - lo), self.captions)
        write_table(candidates, staging / unit.key)
        return {"image_pairs": hi - lo, "candidate_pairs": candidates.num_rows}

    def finish(self, stats: list[dict[str, Any]], staging: Path) -> StageResult:
        counts = {
            "images": self.image_count,
            "captions": self.caption_count,
            "image_pairs": self.pair_count,
            "candidate_pairs": sum(unit["candidate_pairs"] for unit in stats),
            "candidate_shards": len(stats),
        }
        extra = {
            "knn_seconds": round(self.knn_seconds, 3),
            "knn_backend": self.config.knn if self.index == "exact" else self.plan_.backend,
            "device": str(self.device),
            "search": self.search | {"by": self.config.by},
        }
        if "budget" in self.search:  # the whole process's peak so far: index, search and pairs
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
            extra["search"]["budget"] = self.search["budget"] | {"measured_peak_gib": round(peak, 3)}
        return StageResult(counts, extra)


def copy_captions(source: Path, folder: Path, image_ids: np.ndarray) -> tuple[CaptionIndex, int]:
    """The captions of the embedded images, copied batch by batch into `folder` (one shard), and their index."""
    from csts_pipeline.stages.mine.pairs import CaptionIndex

    wanted = np.sort(image_ids)
    caption_ids, owners = [], []

    def write(handle) -> None:
        with pq.ParquetWriter(handle, CAPTIONS_SCHEMA, compression="zstd") as writer:
            for path in paths:
                for batch in pq.ParquetFile(path).iter_batches(batch_size=262_144):
                    owner = batch.column("image_id").to_numpy()
                    keep = _contains(wanted, owner)
                    kept = pa.Table.from_batches([batch]).filter(pa.array(keep)).select(CAPTIONS_SCHEMA.names)
                    writer.write_table(kept.cast(CAPTIONS_SCHEMA))
                    caption_ids.append(kept.column("caption_id").to_numpy())
                    owners.append(owner[keep])

    paths = list_shards(source)
    if not paths:
        raise UserError(f"{source}: no Parquet shards found (run `csts-pipeline embed` first)")
    write_atomic(folder / shard_name(0), write)
    ids, owner_ids = np.concatenate(caption_ids), np.concatenate(owners)
    return CaptionIndex.build(image_ids, ids, owner_ids), len(ids)


def embedding_shape(folder: Path) -> tuple[int, int]:
    """(dimension, bytes a component as stored) from the first embeddings shard's schema ((0, 4) when none)."""
    paths = list_shards(folder)
    if not paths:
        return 0, 4
    kind = pq.read_schema(paths[0]).field("embedding").type
    return kind.list_size, kind.value_type.bit_width // 8


def _contains(sorted_values: np.ndarray, values: np.ndarray) -> np.ndarray:
    """np.isin for a sorted haystack, without isin's sort of both arrays."""
    at = np.minimum(np.searchsorted(sorted_values, values), len(sorted_values) - 1)
    return sorted_values[at] == values


def run(manifest: Manifest, force: bool = False) -> dict:
    """Mine `<work_dir>/mine/` from `<work_dir>/embed/`."""
    return LocalExecutor().run(MineStage(manifest), force=force)
