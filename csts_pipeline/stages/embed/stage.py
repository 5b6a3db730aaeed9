"""embed: every image of the dataset through an open_clip image tower, L2-normalised, written as shards.

Units are shards of `embed.images_per_shard` images in dataset order; they stream through one loader
(`process_many`), so the loader's workers stay busy across shard boundaries. Outputs: `embed/embeddings/` and
`embed/captions/` (pipeline.schemas). The model code lives in stages.embed.encoder, imported in `setup`, so that
planning (and `status`) needs no torch. Under the Ray executor the units run as a Ray Data pipeline instead
(`batch_pipeline`, stages.embed.batches) and write the same shards.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.cluster import BatchPipeline, ClusterStage
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.executor import LocalExecutor
from csts_pipeline.pipeline.manifest import Manifest
from csts_pipeline.pipeline.records import file_fingerprint, fingerprint
from csts_pipeline.pipeline.schemas import CAPTIONS, EMBEDDINGS
from csts_pipeline.pipeline.shards import shard_name, write_table
from csts_pipeline.pipeline.stage import Resources, StagePlan, StageResult, Unit
from csts_pipeline.stages.embed import SPEC
from csts_pipeline.stages.embed.readers.corpus import Corpus
from csts_pipeline.stages.embed.readers.datasets import read_dataset

log = logging.getLogger(__name__)


class EmbedStage(ClusterStage):
    name = SPEC.name
    upstream = SPEC.upstream
    resources = Resources(cpus=1, gpus=1)
    worker_state = ("device", "encoder", "images")

    def __init__(self, manifest: Manifest):
        super().__init__(manifest.work_dir)
        self.manifest = manifest
        self.config = manifest.embed
        self._corpus: Corpus | None = None
        self.precomputed = manifest.data.format == "clip-retrieval"  # embeddings given: no model

    @property
    def corpus(self) -> Corpus:
        if self._corpus is None:
            self._corpus = read_dataset(self.manifest.data)
            if not self._corpus.image_ids:
                data = self.manifest.data
                raise UserError(f"{data.captions or data.images}: no images with captions and files found")
        return self._corpus

    def plan(self) -> StagePlan:
        """Parameters that change the embeddings, fingerprints of what they are computed from, one unit a shard."""
        config, corpus = self.config, self.corpus
        model_config = (
            file_fingerprint(config.model_config_path)
            if config.model_config_path is not None and config.model_config_path.is_file()
            else None
        )
        model = config.model if model_config is None else config.model_config_path.stem
        params = {
            "model": "precomputed" if self.precomputed else model,
            "pretrained": config.pretrained if model_config is None else None,
            "model_config": model_config,
            "precision": config.precision,
            "images_per_shard": config.images_per_shard,
        }
        if config.dtype != "float32":  # float32 runs keep the fingerprint they had before float16 existed
            params["dtype"] = config.dtype
        inputs = self._inputs(corpus)
        per_shard, n = config.images_per_shard, len(corpus.image_ids)
        units = [
            Unit(f"{EMBEDDINGS}/{shard_name(s)}", {"shard": s}, size=min(per_shard, n - s * per_shard))
            for s in range((n + per_shard - 1) // per_shard)
        ]
        return StagePlan(params, inputs, units)

    def _inputs(self, corpus: Corpus) -> dict[str, str]:
        """Fingerprints of the caption file and the image files (name, size, mtime); for archive formats, of
        every shard (they hold both)."""
        if corpus.members is not None:
            shards = sorted({member.path for member in corpus.members})
            listing = [(path, Path(path).stat().st_size, Path(path).stat().st_mtime_ns) for path in shards]
            return {"archives": fingerprint(listing), "images": fingerprint(corpus.file_names)}
        stats = [(corpus.image_root / name).stat() for name in corpus.file_names]
        listing = [(name, st.st_size, st.st_mtime_ns) for name, st in zip(corpus.file_names, stats)]
        return {"captions": file_fingerprint(self.manifest.data.captions), "images": fingerprint(listing)}

    def setup(self) -> None:
        from csts_pipeline.pipeline.device import resolve_device
        from csts_pipeline.stages.embed.encoder import ImageList, load_clip

        corpus = self.corpus
        self.images = ImageList(
            corpus.image_ids, corpus.file_names, corpus.image_root, self.config.images_per_shard, corpus.members
        )
        self.images.dtype = self.config.dtype
        if self.precomputed:
            from csts_pipeline.stages.embed.precomputed import precomputed_dim

            self.device, self.encoder = "none", None
            self.dim, self.model_name = precomputed_dim(self.images), "precomputed"
            return
        self.device = resolve_device(self.manifest.run.device)
        self.encoder = load_clip(self.config, self.device)
        self.dim, self.model_name = self.encoder.dim, self.encoder.name

    def prepare(self, staging: Path, plan: StagePlan) -> list[Unit]:
        captions = staging / CAPTIONS / shard_name(0)
        if not captions.is_file():
            write_table(self.corpus.captions_table(), captions)
        return super().prepare(staging, plan)

    def process(self, unit: Unit, staging: Path) -> dict[str, Any]:
        """One shard on its own (a cluster worker's unit): the loader serves just its images."""
        [(_, stats)] = list(self.process_many([unit], staging))
        return stats

    def process_many(self, units: list[Unit], staging: Path) -> Iterator[tuple[Unit, dict[str, Any]]]:
        from csts_pipeline.stages.embed.encoder import write_embedding_shards

        if self.precomputed:
            from csts_pipeline.stages.embed.precomputed import precomputed_shard

            for unit in units:
                write_table(precomputed_shard(self.images, unit.payload["shard"]), staging / unit.key)
                yield unit, {"images": unit.size, "embedded": unit.size, "skipped": []}
            return
        by_shard = {unit.payload["shard"]: unit for unit in units}
        written = write_embedding_shards(
            self.encoder,
            self.images,
            shards=list(by_shard),
            folder=staging / EMBEDDINGS,
            device=self.device,
            config=self.config,
        )
        for shard, skipped in written:
            unit = by_shard[shard]
            yield unit, {"images": unit.size, "embedded": unit.size - len(skipped), "skipped": skipped}

    def batch_pipeline(self, units: list[Unit], staging: Path) -> BatchPipeline | None:
        """Decode on CPU tasks, CLIP in an actor pool, shards written by the driver (stages.embed.batches)."""
        if self.precomputed:
            return None  # no model: `process` per unit is all there is
        from csts_pipeline.stages.embed.batches import embed_pipeline

        return embed_pipeline(self, units)

    def finish(self, stats: list[dict[str, Any]], staging: Path) -> StageResult:
        corpus = self.corpus
        skipped = [item for unit in stats for item in unit["skipped"]]
        if stats and not sum(unit["embedded"] for unit in stats):
            example = f", e.g. {skipped[0]}" if skipped else ""
            data = self.manifest.data
            raise UserError(
                f"{data.images}: none of the {len(corpus.image_ids)} images could be embedded{example}; "
                "nothing committed"
            )
        counts = {
            "images_in_dataset": len(corpus.image_ids),
            "images_embedded": sum(unit["embedded"] for unit in stats),
            "images_skipped": len(skipped),
            "captions": len(corpus.caption_ids),
            "shards": len(stats),
            "dim": self.dim,
        }
        extra = {
            "model": self.model_name,
            "device": str(self.device),
            "skipped_images": skipped,
            "reader_skips": [vars(s) for s in corpus.skips],
            "reader_skip_counts": corpus.skip_counts(),
        }
        return StageResult(counts, extra)


def run(manifest: Manifest, force: bool = False) -> dict:
    """Embed every image of the manifest's dataset into `<work_dir>/embed/`."""
    return LocalExecutor().run(EmbedStage(manifest), force=force)


def summary_lines(record: dict[str, Any], manifest: Manifest) -> list[str]:
    """What the dataset reader left out, printed after each embed run (csts_pipeline.stages.StageSpec.summary)."""
    if "reader_skip_counts" not in record or record.get("status") != "done":
        return []
    from csts_pipeline.stages.embed.readers.corpus import describe_skips

    return [f"{record['stage']}: {describe_skips(record['reader_skip_counts'])}"]
