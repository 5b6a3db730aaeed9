"""filter: keep the candidate caption pairs that meet the C-STS criteria (paper App. A.2, Table 6).

Reader: the mine stage's candidate shards and captions table. Mapper: per unique caption once, its bag-of-words
ids, word count, character length and sentence embedding (the embeddings cached under
`<work_dir>/text_embeddings/`, so a rerun with other thresholds does not encode again); per chunk of pairs, the
cheap metrics for every pair and the cosine for the pairs that pass them (stages.filter.criteria). Writer: one kept
shard (and with keep_rejected one rejected shard) per candidate shard, each carrying its funnel counts, so a
resumed run skips finished shards and still reports the whole funnel; then the funnel and histograms
(docs/schemas.md, docs/filter.md).

`score_file` is the same scoring for any CSV or Parquet of sentence pairs (`csts-pipeline filter --pairs`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from pipeline.device import resolve_device
from pipeline.errors import UserError
from pipeline.manifest import FilterConfig, Manifest
from pipeline.records import StageRun, fingerprint, read_record, require_record, write_json
from pipeline.shards import list_shards, read_table, write_table
from stages.filter.criteria import CRITERIA, Criteria, ScoredPairs, TextFeatures, pair_metrics_backend, score_pairs
from stages.filter.funnel import Funnel
from stages.filter.text import encode_texts, load_text_encoder

log = logging.getLogger(__name__)
STAGE = "filter"
UPSTREAM = "mine"
EMBEDDING_CACHE = "text_embeddings"
CANDIDATE_COLUMNS = ["pair_id", "caption_id_1", "caption_id_2", "image_id_1", "image_id_2", "image_cosine"]
KEPT_SCHEMA = pa.schema(
    [
        ("pair_id", pa.int64()),
        ("image_id_1", pa.int64()),
        ("image_id_2", pa.int64()),
        ("caption_id_1", pa.int64()),
        ("caption_id_2", pa.int64()),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("image_cosine", pa.float32()),
        ("iou", pa.float32()),
        ("simcse_cosine", pa.float32()),
        ("ratio", pa.float32()),
        ("length", pa.int32()),
    ]
)
REJECTED_SCHEMA = KEPT_SCHEMA.append(pa.field("failed", pa.string()))
FUNNEL_KEY = b"funnel"


def _check_upstream(manifest: Manifest, record: dict) -> None:
    """The mine output must come from this manifest's mine parameters and from the current embed output."""
    mine_dir = manifest.work_dir / UPSTREAM
    for key, made_with in record.get("params", {}).items():
        wanted = getattr(manifest.mine, key, made_with)
        if wanted != made_with:
            raise UserError(
                f"{mine_dir}: made with mine.{key}={made_with!r} but the manifest says {wanted!r}; rerun "
                "`csts-pipeline mine` (or `csts-pipeline run`) first"
            )
    embed_record = read_record(manifest.work_dir / "embed")
    if embed_record is not None and record.get("inputs", {}).get("embed") != embed_record.get("fingerprint"):
        raise UserError(f"{mine_dir}: older than the embed output it should come from; rerun `csts-pipeline mine`")


def plan(manifest: Manifest) -> StageRun:
    upstream = require_record(manifest.work_dir / UPSTREAM, UPSTREAM)
    _check_upstream(manifest, upstream)
    config = manifest.filter
    criteria = Criteria.from_config(config)
    params = {
        **criteria.as_params(),
        "text_encoder": config.text_encoder if criteria.needs_encoder else None,
        "text_pooling": config.text_pooling if criteria.needs_encoder else None,
        "keep_rejected": config.keep_rejected,
        "full_report": config.full_report,
    }
    return StageRun(STAGE, manifest.work_dir / STAGE, params, {UPSTREAM: upstream["fingerprint"]})


def _unique(texts: list[str]) -> tuple[list[str], np.ndarray]:
    """Distinct texts in order of first appearance, and each input's row among them."""
    rows: dict[str, int] = {}
    inverse = np.fromiter((rows.setdefault(text, len(rows)) for text in texts), np.int64, len(texts))
    return list(rows), inverse


def sentence_embeddings(
    config: FilterConfig, texts: list[str], device, cache_dir: Path | None = None
) -> tuple[np.ndarray, dict]:
    """Unit embeddings of `texts` with the configured encoder; read from `cache_dir` when this encoder has
    encoded these texts before, else encoded and stored there (atomically)."""
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()
    key = fingerprint({"encoder": config.text_encoder, "pooling": config.text_pooling, "texts": digest})
    path = cache_dir / f"{key}.npy" if cache_dir is not None else None
    if path is not None and path.is_file():
        try:
            cached = np.load(path)
        except (OSError, ValueError):
            cached = None
        if cached is not None and cached.shape[0] == len(texts):
            log.info("filter: sentence embeddings from the cache %s", path)
            return cached, {"cache": str(path), "encoded": False, "dim": int(cached.shape[1])}
    model = load_text_encoder(config.text_encoder, config.text_pooling, device)
    log.info("filter: encoding %d distinct sentences with %s on %s", len(texts), config.text_encoder, device)
    started = time.perf_counter()
    embeddings = encode_texts(model, texts, config.text_batch_size, progress=True)
    info = {"encoded": True, "dim": int(embeddings.shape[1]), "encode_seconds": round(time.perf_counter() - started, 3)}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("wb") as handle:
            np.save(handle, embeddings)
        os.replace(tmp, path)
        meta = {"encoder": config.text_encoder, "pooling": config.text_pooling, "texts": len(texts), **info}
        write_json(path.with_suffix(".json"), meta)
        info["cache"] = str(path)
    return embeddings, info


def _metric_columns(scored: ScoredPairs, select: np.ndarray) -> dict[str, pa.Array]:
    cosine = scored.metrics["simcse_cosine"][select]
    return {
        "iou": pa.array(scored.metrics["iou"][select].astype(np.float32)),
        "simcse_cosine": pa.array(cosine.astype(np.float32), mask=np.isnan(cosine)),
        "ratio": pa.array(scored.metrics["ratio"][select].astype(np.float32)),
        "length": pa.array(scored.metrics["length"][select].astype(np.int32)),
    }


def _output(
    candidates: pa.Table,
    rows: tuple[np.ndarray, np.ndarray],
    texts: pa.Array,
    scored: ScoredPairs,
    select: np.ndarray,
    schema: pa.Schema,
) -> pa.Table:
    """The kept (or rejected) rows of one chunk of candidates, in the filter's schema."""
    take = pa.array(select, pa.int64())
    columns = {name: candidates.column(name).take(take) for name in ("pair_id", "image_id_1", "image_id_2")}
    columns |= {name: candidates.column(name).take(take) for name in ("caption_id_1", "caption_id_2")}
    columns["sentence1"] = texts.take(pa.array(rows[0][select]))
    columns["sentence2"] = texts.take(pa.array(rows[1][select]))
    columns["image_cosine"] = candidates.column("image_cosine").take(take).cast(pa.float32())
    columns |= _metric_columns(scored, select)
    if "failed" in schema.names:
        columns["failed"] = pa.array(np.asarray(CRITERIA, object)[scored.first_failed[select]], pa.string())
    return pa.table(columns, schema=schema)


class _CaptionLookup:
    """caption_id -> row of the captions table, by binary search over the sorted ids."""

    def __init__(self, caption_ids: np.ndarray, source: Path):
        self.order = np.argsort(caption_ids, kind="stable")
        self.sorted_ids = caption_ids[self.order]
        self.source = source

    def rows(self, caption_ids: np.ndarray, shard: Path) -> np.ndarray:
        if not len(self.sorted_ids):
            raise UserError(f"{self.source}: no captions")
        position = np.searchsorted(self.sorted_ids, caption_ids).clip(max=len(self.sorted_ids) - 1)
        unknown = self.sorted_ids[position] != caption_ids
        if unknown.any():
            raise UserError(
                f"{shard}: caption_id {int(caption_ids[unknown][0])} is not in {self.source} "
                f"({int(unknown.sum())} such pairs); rerun `csts-pipeline mine`"
            )
        return self.order[position]


def _read_candidates(path: Path) -> pa.Table:
    table = read_table(path)
    missing = [name for name in CANDIDATE_COLUMNS if name not in table.column_names]
    if missing:
        raise UserError(f"{path}: not a mine candidates shard (missing columns {', '.join(missing)})")
    return table


def _shard_funnel(path: Path, criteria: Criteria) -> Funnel:
    metadata = read_table(path).schema.metadata or {}
    if FUNNEL_KEY not in metadata:
        raise UserError(f"{path}: has no funnel counts; rerun with --force")
    return Funnel.from_json(criteria, json.loads(metadata[FUNNEL_KEY]))


def run(manifest: Manifest, force: bool = False) -> dict:
    """Filter `<work_dir>/mine/` into `<work_dir>/filter/`, print the funnel."""
    stage = plan(manifest)
    config = manifest.filter
    criteria = Criteria.from_config(config)
    if stage.is_done() and not force:
        print(Funnel.from_json(criteria, read_record(stage.folder)["funnel"]).table())
        log.info("filter: up to date in %s (nothing to do; --force recomputes)", stage.folder)
        return {"status": "up-to-date", "folder": str(stage.folder)}
    mine_dir = manifest.work_dir / UPSTREAM
    shards = list_shards(mine_dir / "candidates")
    if not shards:
        raise UserError(f"{mine_dir / 'candidates'}: no candidate shards; rerun `csts-pipeline mine`")
    captions = read_table(mine_dir / "captions.parquet")
    if not {"caption_id", "caption"} <= set(captions.column_names):
        raise UserError(f"{mine_dir / 'captions.parquet'}: needs the columns caption_id and caption")
    resumed = stage.begin(force=force)
    started = time.perf_counter()

    caption_texts = captions.column("caption").combine_chunks()
    lookup = _CaptionLookup(captions.column("caption_id").to_numpy(), mine_dir / "captions.parquet")
    sentences, sentence_of_caption = _unique(caption_texts.to_pylist())
    features = TextFeatures.build(sentences)
    device = resolve_device(manifest.run.device)
    embeddings, encoder_info = None, {}
    if criteria.needs_encoder:
        cache_dir = manifest.work_dir / EMBEDDING_CACHE
        embeddings, encoder_info = sentence_embeddings(config, sentences, device, cache_dir)
    backend = pair_metrics_backend(features, embeddings, device)
    features_seconds = time.perf_counter() - started

    funnel = Funnel(criteria)
    reused = 0
    for shard in tqdm(shards, desc="filter", unit="shard", dynamic_ncols=True):
        kept_path = stage.folder / "kept" / shard.name
        rejected_path = stage.folder / "rejected" / shard.name
        if resumed and kept_path.is_file() and (rejected_path.is_file() or not config.keep_rejected):
            funnel.merge(_shard_funnel(kept_path, criteria))
            reused += 1
            continue
        candidates = _read_candidates(shard)
        rows = (
            lookup.rows(candidates.column("caption_id_1").to_numpy(), shard),
            lookup.rows(candidates.column("caption_id_2").to_numpy(), shard),
        )
        first, second = sentence_of_caption[rows[0]], sentence_of_caption[rows[1]]
        shard_funnel = Funnel(criteria)
        kept_parts, rejected_parts = [], []
        for lo in range(0, max(candidates.num_rows, 1), config.pairs_per_chunk):
            part = slice(lo, lo + config.pairs_per_chunk)
            scored = score_pairs(backend, criteria, first[part], second[part], config.full_report)
            shard_funnel.add(scored)
            chunk = candidates.slice(lo, config.pairs_per_chunk)
            chunk_rows = (rows[0][part], rows[1][part])
            kept = np.flatnonzero(scored.kept)
            kept_parts.append(_output(chunk, chunk_rows, caption_texts, scored, kept, KEPT_SCHEMA))
            if config.keep_rejected:
                rejected = np.flatnonzero(~scored.kept)
                rejected_parts.append(_output(chunk, chunk_rows, caption_texts, scored, rejected, REJECTED_SCHEMA))
        if config.keep_rejected:
            write_table(pa.concat_tables(rejected_parts), rejected_path)
        kept_table = pa.concat_tables(kept_parts)
        kept_table = kept_table.replace_schema_metadata({FUNNEL_KEY: json.dumps(shard_funnel.to_json())})
        write_table(kept_table, kept_path)
        funnel.merge(shard_funnel)

    report = funnel.to_json()
    write_json(stage.folder / "histograms.json", report["histograms"])
    funnel.save_plot(stage.folder / "histograms.png")
    counts = {"candidates": funnel.candidates, "kept": funnel.kept, "rejected": funnel.candidates - funnel.kept}
    counts |= {"captions": captions.num_rows, "distinct_sentences": len(sentences), "shards": len(shards)}
    record = stage.finish(
        counts,
        funnel=report,
        resumed=resumed,
        shards_reused=reused,
        text_encoder=encoder_info,
        device=str(device),
        caption_features_seconds=round(features_seconds, 3),
        seconds_total=round(time.perf_counter() - started, 3),
    )
    print(funnel.table())
    return record


def _read_pairs(path: Path) -> pa.Table:
    if not path.is_file():
        raise UserError(f"{path}: pairs file not found")
    if path.suffix.lower() == ".parquet":
        table = read_table(path)
    elif path.suffix.lower() == ".csv":
        from pyarrow import csv

        strings = {"sentence1": pa.string(), "sentence2": pa.string()}
        try:
            table = csv.read_csv(path, convert_options=csv.ConvertOptions(column_types=strings))
        except (pa.ArrowInvalid, OSError) as exc:
            raise UserError(f"{path}: not a readable CSV file ({str(exc).splitlines()[0]})") from None
    else:
        raise UserError(f"{path}: give a .csv or .parquet file of sentence pairs")
    missing = [name for name in ("sentence1", "sentence2") if name not in table.column_names]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)} (found: {', '.join(table.column_names)})")
    for name in ("sentence1", "sentence2"):
        nulls = table.column(name).null_count
        if nulls:
            raise UserError(f"{path}: {nulls} row(s) without a {name}")
    return table


def score_file(manifest: Manifest, pairs: Path, out: Path) -> dict:
    """Score every pair of a CSV or Parquet file (columns sentence1, sentence2) under the manifest's criteria:
    writes the input columns plus the four metrics, `kept` and `failed` to `out` (.csv or .parquet)."""
    if out.suffix.lower() not in (".csv", ".parquet"):
        raise UserError(f"--out {out}: give a .csv or .parquet file name for the scored pairs")
    table = _read_pairs(pairs)
    config = manifest.filter
    criteria = Criteria.from_config(config)
    started = time.perf_counter()
    sentences, rows = _unique(table.column("sentence1").to_pylist() + table.column("sentence2").to_pylist())
    first, second = rows[: table.num_rows], rows[table.num_rows :]
    device = resolve_device(manifest.run.device)
    embeddings = sentence_embeddings(config, sentences, device)[0] if criteria.needs_encoder else None
    backend = pair_metrics_backend(TextFeatures.build(sentences), embeddings, device)

    funnel = Funnel(criteria)
    parts: dict[str, list] = {name: [] for name in (*CRITERIA, "kept", "failed")}
    for lo in range(0, max(table.num_rows, 1), config.pairs_per_chunk):
        part = slice(lo, lo + config.pairs_per_chunk)
        scored = score_pairs(backend, criteria, first[part], second[part], cosine_for_all=True)
        funnel.add(scored)
        everything = np.arange(len(scored))
        for name, column in _metric_columns(scored, everything).items():
            parts[name].append(column)
        parts["kept"].append(pa.array(scored.kept))
        failed = np.asarray(CRITERIA, object)[scored.first_failed]
        parts["failed"].append(pa.array(np.where(scored.kept, None, failed), pa.string()))
    for name, chunks in parts.items():
        column = pa.chunked_array(chunks)
        if name in table.column_names:
            table = table.drop_columns([name])
        table = table.append_column(name, column)

    if out.suffix.lower() == ".parquet":
        write_table(table, out)
    else:
        from pyarrow import csv

        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        csv.write_csv(table, tmp)
        os.replace(tmp, out)
    print(funnel.table())
    return {
        "pairs": table.num_rows,
        "kept": funnel.kept,
        "out": str(out),
        "seconds": round(time.perf_counter() - started, 3),
    }
