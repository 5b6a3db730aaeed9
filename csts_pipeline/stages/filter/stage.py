"""filter: keep the candidate caption pairs that meet the C-STS criteria (paper App. A.2, Table 6).

`setup` computes, once per unique caption, its bag-of-words ids, word count, character length and sentence
embedding (cached under `<work_dir>/text_embeddings/`, so a rerun with other thresholds does not encode again).
Each unit is one mine candidates shard: the cheap metrics for every pair, the cosine for the pairs that pass them
(stages.filter.criteria), one kept shard (and with keep_rejected one rejected shard) carrying its funnel counts.
`finish` merges the funnels and writes the histograms (docs/filter.md, pipeline.schemas).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.cluster import ClusterStage
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.executor import LocalExecutor
from csts_pipeline.pipeline.manifest import Manifest
from csts_pipeline.pipeline.records import require_record, write_json
from csts_pipeline.pipeline.schemas import (
    CANDIDATES,
    CANDIDATES_SCHEMA,
    CAPTIONS,
    KEPT,
    KEPT_SCHEMA,
    REJECTED,
    REJECTED_SCHEMA,
    check_columns,
)
from csts_pipeline.pipeline.shards import read_shards, read_table, write_table
from csts_pipeline.pipeline.stage import Resources, Stage, StagePlan, StageResult, Unit
from csts_pipeline.stages.filter import SPEC
from csts_pipeline.stages.filter.criteria import Criteria
from csts_pipeline.stages.filter.lookup import CaptionLookup
from csts_pipeline.stages.mine import SPEC as MINE

log = logging.getLogger(__name__)
UPSTREAM = MINE.name  # the folder it reads
EMBEDDING_CACHE = "text_embeddings"
FUNNEL_KEY = b"funnel"


def _check_upstream(manifest: Manifest, record: dict) -> None:
    """The mine output must come from this manifest's mine parameters (the executor checks that it comes from the
    current embed output)."""
    mine_dir = manifest.work_dir / UPSTREAM
    for key, made_with in record.get("params", {}).items():
        wanted = getattr(manifest.mine, key, made_with)
        if wanted != made_with:
            raise UserError(
                f"{mine_dir}: made with mine.{key}={made_with!r} but the manifest says {wanted!r}; rerun "
                "`csts-pipeline mine` (or `csts-pipeline run`) first"
            )


class FilterStage(ClusterStage):
    name = SPEC.name
    upstream = SPEC.upstream
    resources = Resources(cpus=1, gpus=1)
    worker_state = ("sentence_texts", "lookup", "sentence_of_caption", "device", "encoder_info", "backend")

    def __init__(self, manifest: Manifest):
        super().__init__(manifest.work_dir)
        self.manifest = manifest
        self.config = manifest.filter
        self.criteria = Criteria.from_config(self.config)

    def upstream_stage(self) -> Stage:
        """The upstream stage under this manifest (pipeline.executor.stale_reason checks its output against it)."""
        return MINE.load()(self.manifest)

    def plan(self) -> StagePlan:
        """One unit per mine candidates shard that mine's record lists."""
        upstream = require_record(self.work_dir / UPSTREAM, UPSTREAM)
        _check_upstream(self.manifest, upstream)
        config, criteria = self.config, self.criteria
        params = {
            **criteria.as_params(),
            "text_encoder": config.text_encoder if criteria.needs_encoder else None,
            "text_pooling": config.text_pooling if criteria.needs_encoder else None,
            "keep_rejected": config.keep_rejected,
            "full_report": config.full_report,
        }
        shards = sorted(name for name in upstream["output_files"] if name.startswith(f"{CANDIDATES}/"))
        if not shards:
            raise UserError(f"{self.work_dir / UPSTREAM / CANDIDATES}: no candidate shards; rerun `csts-pipeline mine`")
        units = [
            Unit(f"{KEPT}/{Path(name).name}", {"candidates": name}, size=upstream["output_files"][name]["rows"])
            for name in shards
        ]
        return StagePlan(params, {UPSTREAM: upstream["fingerprint"]}, units)

    def setup(self) -> None:
        """Per distinct caption once: features and (cached) embeddings; the encoder is loaded only to encode."""
        from csts_pipeline.pipeline.device import resolve_device
        from csts_pipeline.stages.filter.metrics import TextFeatures, pair_metrics_backend
        from csts_pipeline.stages.filter.scoring import sentence_embeddings, unique_texts

        captions_dir = self.work_dir / UPSTREAM / CAPTIONS
        captions = read_shards(captions_dir)
        if not {"caption_id", "caption"} <= set(captions.column_names):
            raise UserError(f"{captions_dir}: needs the columns caption_id and caption")
        sentences, sentence_of_caption = unique_texts(captions.column("caption").to_pylist())
        self.sentence_texts = pa.array(sentences, pa.string())
        self.lookup = CaptionLookup(captions.column("caption_id").to_numpy(), sentence_of_caption, captions_dir)
        self.device = resolve_device(self.manifest.run.device)
        embeddings, self.encoder_info = None, {}
        if self.criteria.needs_encoder:
            cache_dir = self.work_dir / EMBEDDING_CACHE
            device_setting = self.manifest.run.device
            embeddings, self.encoder_info = sentence_embeddings(
                self.config,
                sentences,
                device=self.device,
                cache_dir=cache_dir,
                tasks=self.tasks,
                device_setting=device_setting,
            )
        self.backend = pair_metrics_backend(TextFeatures.build(sentences), embeddings, self.device)
        self.caption_count, self.sentence_count = captions.num_rows, len(sentences)
        self._load_kernels(captions.column("caption_id").to_numpy()[:1])

    def _load_kernels(self, caption_ids: np.ndarray) -> None:
        """Score one pair, so that the compiled kernels are loaded (numba's on-disk cache, or compiled on a first
        run) here, with the models, and not inside the first unit's time."""
        from csts_pipeline.stages.filter.criteria import score_pairs

        if len(caption_ids):
            sentence = self.lookup.sentences(caption_ids, self.work_dir / UPSTREAM / CAPTIONS)
            score_pairs(self.backend, self.criteria, sentence, sentence, self.config.full_report)

    def _read(self, unit: Unit) -> tuple[Path, pa.Table]:
        source = self.work_dir / UPSTREAM / unit.payload["candidates"]
        return source, check_columns(read_table(source), CANDIDATES_SCHEMA, source)

    def unit_files(self, unit: Unit) -> list[str]:
        """The kept shard, and the rejected one with keep_rejected."""
        name = Path(unit.key).name
        return [unit.key, f"{REJECTED}/{name}"] if self.config.keep_rejected else [unit.key]

    def process(self, unit: Unit, staging: Path) -> dict[str, Any]:
        return self._score(unit, *self._read(unit), staging)

    def _score(self, unit: Unit, source: Path, candidates: pa.Table, staging: Path) -> dict[str, Any]:
        from csts_pipeline.stages.filter.criteria import score_pairs
        from csts_pipeline.stages.filter.funnel import Funnel
        from csts_pipeline.stages.filter.scoring import output_table

        first = self.lookup.sentences(candidates.column("caption_id_1").to_numpy(), source)
        second = self.lookup.sentences(candidates.column("caption_id_2").to_numpy(), source)
        config, funnel = self.config, Funnel(self.criteria)
        kept_parts, rejected_parts = [], []
        for lo in range(0, max(candidates.num_rows, 1), config.pairs_per_chunk):
            part = slice(lo, lo + config.pairs_per_chunk)
            scored = score_pairs(self.backend, self.criteria, first[part], second[part], config.full_report)
            funnel.add(scored)
            chunk, chunk_rows = candidates.slice(lo, config.pairs_per_chunk), (first[part], second[part])
            texts = self.sentence_texts
            kept_parts.append(
                output_table(
                    chunk,
                    chunk_rows,
                    texts=texts,
                    scored=scored,
                    select=np.flatnonzero(scored.kept),
                    schema=KEPT_SCHEMA,
                )
            )
            if config.keep_rejected:
                rejected = np.flatnonzero(~scored.kept)
                rejected_parts.append(
                    output_table(chunk, chunk_rows, texts=texts, scored=scored, select=rejected, schema=REJECTED_SCHEMA)
                )
        name = Path(unit.key).name
        if config.keep_rejected:
            write_table(pa.concat_tables(rejected_parts), staging / REJECTED / name)
        kept = pa.concat_tables(kept_parts).replace_schema_metadata({FUNNEL_KEY: json.dumps(funnel.to_json())})
        write_table(kept, staging / KEPT / name)
        return {"funnel": funnel.to_json()}

    def finish(self, stats: list[dict[str, Any]], staging: Path) -> StageResult:
        from csts_pipeline.stages.filter.funnel import Funnel

        funnel = Funnel(self.criteria)
        for unit in stats:
            funnel.merge(Funnel.from_json(self.criteria, unit["funnel"]))
        report = funnel.to_json()
        write_json(staging / "histograms.json", report["histograms"])
        funnel.save_plot(staging / "histograms.png")
        counts = {"candidates": funnel.candidates, "kept": funnel.kept, "rejected": funnel.candidates - funnel.kept}
        counts |= {"captions": self.caption_count, "distinct_sentences": self.sentence_count, "shards": len(stats)}
        extra = {"funnel": report, "text_encoder": self.encoder_info, "device": str(self.device)}
        return StageResult(counts, extra)


def run(manifest: Manifest, force: bool = False) -> dict:
    """Filter `<work_dir>/mine/` into `<work_dir>/filter/`."""
    return LocalExecutor().run(FilterStage(manifest), force=force)


def funnel_table(manifest: Manifest, record: dict) -> str:
    """The printable funnel of a filter record."""
    from csts_pipeline.stages.filter.funnel import Funnel

    return Funnel.from_json(Criteria.from_config(manifest.filter), record["funnel"]).table()


def summary_lines(record: dict, manifest: Manifest) -> list[str]:
    """The funnel, printed after each filter run (csts_pipeline.stages.StageSpec.summary)."""
    return [funnel_table(manifest, record)] if "funnel" in record else []
