"""Bounded samples of a run's pairs: the kept pairs stratified by sentence cosine, and for each criterion the
rejected pairs closest to its threshold.

Tables are read batch by batch and only a few rows per stratum or criterion are held, so memory is bounded by one
record batch whatever the run's size. Near-threshold rejects come from `filter/rejected/` when the filter wrote it
(`--keep-rejected`); otherwise from a seeded random sample of mine's candidates, scored with the filter's own
metric functions (stages.filter.criteria.score_pairs), never from every pair."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from csts_pipeline.pipeline.schemas import CANDIDATES, CAPTIONS, IMAGE_PAIRS, KEPT, KEPT_SCHEMA, REJECTED
from csts_pipeline.pipeline.shards import list_shards, read_shards
from csts_pipeline.stages.filter.criteria import CRITERIA, Criteria

BATCH = 65_536
SHOWN = [*KEPT_SCHEMA.names]


def iter_batches(folder: Path, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """Every row of a table folder, one record batch at a time."""
    for path in list_shards(folder):
        yield from pq.ParquetFile(path).iter_batches(batch_size=BATCH, columns=columns)


def criteria_of(record: dict[str, Any]) -> Criteria:
    """The thresholds the filter ran with (its record), not the manifest's current ones."""
    params = record["params"]
    return Criteria(**{key: params.get(key) for key in Criteria.__dataclass_fields__})


def _smallest(held: pa.Table | None, batch: pa.Table, keys: np.ndarray, n: int) -> pa.Table:
    """The n rows of held + batch with the smallest `_key`, held first (ties keep the earlier row)."""
    if len(keys) > n:
        batch, keys = batch.take(np.argpartition(keys, n - 1)[:n]), np.partition(keys, n - 1)[:n]
    batch = batch.append_column("_key", pa.array(keys, pa.float64()))
    table = batch if held is None else pa.concat_tables([held, batch])
    order = np.argsort(table.column("_key").to_numpy(), kind="stable")[:n]
    return table.take(order)


def strata_edges(histogram: dict[str, Any], strata: int) -> np.ndarray:
    """Inner edges that cut the kept pairs' distribution (filter's `after` histogram) into equal shares."""
    counts, edges = np.asarray(histogram["after"], np.float64), np.asarray(histogram["edges"], np.float64)
    if counts.sum() == 0:
        return np.array([])
    cumulative = np.cumsum(counts) / counts.sum()
    cuts = [edges[1 + int(np.searchsorted(cumulative, q))] for q in np.arange(1, strata) / strata]
    return np.unique(np.asarray(cuts))


def kept_sample(filter_dir: Path, histograms: dict[str, Any], per_stratum: int, seed: int) -> tuple[list[dict], str]:
    """Up to `per_stratum` kept pairs from each quantile stratum of sentence cosine (of IoU when the cosine is
    off), chosen by seeded random keys: a uniform sample within each stratum, in one pass."""
    metric = "simcse_cosine" if sum(histograms["simcse_cosine"]["after"]) else "iou"
    edges = strata_edges(histograms[metric], 4)
    rng = np.random.default_rng(seed)
    held: dict[int, pa.Table | None] = {}
    for batch in iter_batches(filter_dir / KEPT, SHOWN):
        table = pa.Table.from_batches([batch])
        values = table.column(metric).to_numpy(zero_copy_only=False)
        stratum = np.searchsorted(edges, np.nan_to_num(values), side="right")
        keys = rng.random(len(values))
        for s in np.unique(stratum):
            rows = np.flatnonzero(stratum == s)
            held[int(s)] = _smallest(held.get(int(s)), table.take(rows), keys[rows], per_stratum)
    pairs = []
    for s in sorted(held):
        for row in held[s].drop(["_key"]).to_pylist():
            pairs.append(row | {"stratum": _stratum_label(metric, edges, s)})
    return pairs, metric


def _stratum_label(metric: str, edges: np.ndarray, s: int) -> str:
    """The stratum's range of the metric, as the page names it."""
    if not len(edges):
        return f"{metric}: all kept pairs"
    if s == 0:
        return f"{metric} below {edges[0]:.2f}"
    if s == len(edges):
        return f"{metric} {edges[-1]:.2f} and above"
    return f"{metric} {edges[s - 1]:.2f} to {edges[s]:.2f}"


def distance_outside(criteria: Criteria, name: str, values: np.ndarray) -> np.ndarray:
    """How far each value lies beyond the criterion's bounds (0 inside them; NaN where not computed)."""
    low, high = criteria.bounds(name)
    distance = np.zeros(len(values))
    if low is not None:
        distance = np.maximum(distance, low - values)
    if high is not None:
        distance = np.maximum(distance, values - high)
    return distance


@dataclass
class NearMisses:
    """For each active criterion, the rejected pairs (failed first on it) closest to its threshold."""

    pairs: dict[str, list[dict]]
    source: str  # what they were drawn from, said on the page
    cosine_note: str = ""


def rejected_batches(
    work_dir: Path, records: dict[str, dict], sample_size: int, seed: int
) -> tuple[Iterator[pa.Table], str, str]:
    """The rejected pairs with their `failed` column, batch by batch: from filter/rejected/ when the filter wrote
    it, else a seeded random sample of mine's candidates scored as the filter does (kept ones included, as
    `failed == "kept"`); with what they were drawn from and a note when the cosines could not be read."""
    if any(name.startswith(f"{REJECTED}/") for name in records["filter"]["output_files"]):
        total = records["filter"]["funnel"]["rejected"]
        batches = (pa.Table.from_batches([b]) for b in iter_batches(work_dir / "filter" / REJECTED, [*SHOWN, "failed"]))
        return batches, f"all {total:,} rejected pairs (filter/rejected/)", ""
    criteria = criteria_of(records["filter"])
    table, cosine_note = _scored_candidate_sample(work_dir, records, criteria, sample_size, seed)
    candidates = records["mine"]["counts"]["candidate_pairs"]
    source = f"a random sample of {table.num_rows:,} of the {candidates:,} candidate pairs, scored as the filter does"
    return iter([table]), source, cosine_note


def near_misses(work_dir: Path, records: dict[str, dict], n: int, sample_size: int, seed: int) -> NearMisses:
    """For each criterion, the n rejected pairs it rejected first nearest its threshold."""
    criteria = criteria_of(records["filter"])
    batches, source, cosine_note = rejected_batches(work_dir, records, sample_size, seed)
    held: dict[str, pa.Table | None] = {}
    rng = np.random.default_rng(seed)
    for table in batches:
        _keep_closest(held, table, criteria, n, rng)
    return NearMisses(_as_rows(held), source, cosine_note)


def _keep_closest(
    held: dict[str, pa.Table | None], table: pa.Table, criteria: Criteria, n: int, rng: np.random.Generator
) -> None:
    """Per criterion, the n rows failed first on it nearest its bound; equal distances are drawn at random (a
    jitter far below any difference of the metrics), so ties do not all come from the first shard."""
    failed = table.column("failed")
    for name in criteria.active():
        rows = table.filter(pc.equal(failed, name))
        if rows.num_rows:
            values = rows.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
            distance = distance_outside(criteria, name, values) + 1e-9 * rng.random(len(values))
            held[name] = _smallest(held.get(name), rows, distance, n)


def _as_rows(held: dict[str, pa.Table | None]) -> dict[str, list[dict]]:
    return {
        name: [row | {"distance": row.pop("_key")} for row in table.to_pylist()]
        for name in CRITERIA
        if (table := held.get(name)) is not None
    }


def _scored_candidate_sample(
    work_dir: Path, records: dict[str, dict], criteria: Criteria, size: int, seed: int
) -> tuple[pa.Table, str]:
    """About `size` candidates drawn uniformly (seeded), with the filter's metrics and first failed criterion."""
    from csts_pipeline.stages.filter.criteria import score_pairs
    from csts_pipeline.stages.filter.metrics import NumbaPairMetrics, TextFeatures
    from csts_pipeline.stages.filter.scoring import unique_texts

    mine_dir = work_dir / "mine"
    share = min(1.0, size / max(1, records["mine"]["counts"]["candidate_pairs"]))
    rng, parts = np.random.default_rng(seed), []
    for batch in iter_batches(mine_dir / CANDIDATES, None):
        parts.append(pa.Table.from_batches([batch]).filter(pa.array(rng.random(batch.num_rows) < share)))
    sample = pa.concat_tables(parts).slice(0, size)
    captions = read_shards(mine_dir / CAPTIONS, ["caption_id", "caption"])
    sentences, sentence_of_caption = unique_texts(captions.column("caption").to_pylist())
    ids = captions.column("caption_id").to_numpy()
    order = np.argsort(ids)
    rows = [sentence_of_caption[order[np.searchsorted(ids, sample.column(c).to_numpy(), sorter=order)]] for c in
            ("caption_id_1", "caption_id_2")]  # fmt: skip
    used, local = np.unique(np.concatenate(rows), return_inverse=True)
    first, second = local[: sample.num_rows], local[sample.num_rows :]
    embeddings, note = _cached_embeddings(work_dir, records["filter"], len(sentences), used)
    if embeddings is None and criteria.needs_encoder:
        criteria = Criteria(**(criteria.as_params() | {"min_cosine": None, "max_cosine": None}))
    texts = [sentences[i] for i in used]
    scored = score_pairs(NumbaPairMetrics(TextFeatures.build(texts), embeddings), criteria, first, second)
    text_column = pa.array(texts, pa.string())
    columns = {name: sample.column(name) for name in ("pair_id", "image_id_1", "image_id_2")}
    columns |= {"caption_id_1": sample.column("caption_id_1"), "caption_id_2": sample.column("caption_id_2")}
    columns |= {"sentence1": text_column.take(first), "sentence2": text_column.take(second)}
    columns["image_cosine"] = sample.column("image_cosine")
    columns |= {name: pa.array(scored.metrics[name], pa.float64(), from_pandas=True) for name in CRITERIA}
    columns["failed"] = pa.array(np.asarray(("kept", *CRITERIA), object)[scored.first_failed + 1], pa.string())
    return pa.table(columns), note


def _cached_embeddings(
    work_dir: Path, record: dict[str, Any], count: int, rows: np.ndarray
) -> tuple[np.ndarray | None, str]:
    """The filter's cached sentence embeddings of `rows` (memory-mapped, so only those rows are read)."""
    cache = record.get("text_encoder", {}).get("cache")
    if not cache:
        return None, ""
    path = Path(cache) if Path(cache).is_file() else work_dir / "text_embeddings" / Path(cache).name
    try:
        embeddings = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return None, f"the sentence embedding cache {path} is gone, so near-threshold cosines are not shown"
    if embeddings.shape[0] != count:
        return None, f"{path} does not match the mine captions, so near-threshold cosines are not shown"
    return np.ascontiguousarray(embeddings[rows], np.float32), ""


def image_cosine_histogram(work_dir: Path, bins: int = 60) -> dict[str, Any]:
    """Image cosine of every image neighbour pair (mine/image_pairs) and of the kept pairs, in fixed bins
    spanning the values' range (from the Parquet statistics, so one pass each)."""
    low, high = 1.0, -1.0
    for path in list_shards(work_dir / "mine" / IMAGE_PAIRS):
        meta = pq.ParquetFile(path).metadata
        column = meta.schema.names.index("cosine")
        for group in range(meta.num_row_groups):
            stats = meta.row_group(group).column(column).statistics
            if stats is not None and stats.has_min_max:
                low, high = min(low, float(stats.min)), max(high, float(stats.max))
    if low > high:
        low, high = -1.0, 1.0
    edges = np.linspace(low, high if high > low else low + 1e-3, bins + 1)
    counts = {}
    for key, folder, column in (
        ("before", f"mine/{IMAGE_PAIRS}", "cosine"),
        ("after", f"filter/{KEPT}", "image_cosine"),
    ):
        total = np.zeros(bins, np.int64)
        for batch in iter_batches(work_dir / folder, [column]):
            values = np.clip(batch.column(0).to_numpy(zero_copy_only=False), edges[0], edges[-1])
            total += np.histogram(values, edges)[0]
        counts[key] = total
    return {"edges": edges, **counts}
