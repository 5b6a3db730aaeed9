"""`csts-pipeline filter --pairs`: the filter's scoring for any CSV or Parquet file of sentence pairs."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from csts_pipeline.pipeline.device import resolve_device
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import Manifest
from csts_pipeline.pipeline.shards import read_table, write_atomic, write_table
from csts_pipeline.stages.filter.criteria import CRITERIA, Criteria, score_pairs
from csts_pipeline.stages.filter.funnel import Funnel
from csts_pipeline.stages.filter.metrics import TextFeatures, pair_metrics_backend
from csts_pipeline.stages.filter.scoring import metric_columns, sentence_embeddings, unique_texts


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
    writes the input columns plus the four metrics, `kept` and `failed` to `out` (.csv or .parquet). A pair with a
    blank sentence (empty or white space) is not scored (two blanks would agree at cosine 1): its metrics are empty,
    `failed` is `blank`, and the funnel counts only the scored pairs."""
    if out.suffix.lower() not in (".csv", ".parquet"):
        raise UserError(f"--out {out}: give a .csv or .parquet file name for the scored pairs")
    table = _read_pairs(pairs)
    started = time.perf_counter()
    blank = np.array(
        [not (a.strip() and b.strip()) for a, b in zip(table["sentence1"].to_pylist(), table["sentence2"].to_pylist())],
        dtype=bool,
    )
    funnel, columns = _score(manifest, table.filter(pa.array(~blank)))
    if blank.any():  # the scored rows back in place, the blank ones empty
        at = np.cumsum(~blank) - 1
        where = pa.array(np.where(blank, -1, at), mask=blank)
        columns = {name: column.take(where) for name, column in columns.items()}
        columns["kept"] = pc.fill_null(columns["kept"], False)
        columns["failed"] = pc.if_else(pa.array(blank), "blank", columns["failed"])
    for name, column in columns.items():
        if name in table.column_names:
            table = table.drop_columns([name])
        table = table.append_column(name, column)

    if out.suffix.lower() == ".parquet":
        write_table(table, out)
    else:
        from pyarrow import csv

        write_atomic(out, lambda handle: csv.write_csv(table, handle))
    return {
        "funnel": funnel,
        "pairs": table.num_rows,
        "blank": int(blank.sum()),
        "kept": funnel.kept,
        "out": str(out),
        "seconds": round(time.perf_counter() - started, 3),
    }


def _score(manifest: Manifest, table: pa.Table) -> tuple[Funnel, dict[str, pa.ChunkedArray]]:
    """The funnel and the metric, `kept` and `failed` columns of every pair of `table`."""
    config = manifest.filter
    criteria = Criteria.from_config(config)
    sentences, rows = unique_texts(table.column("sentence1").to_pylist() + table.column("sentence2").to_pylist())
    first, second = rows[: table.num_rows], rows[table.num_rows :]
    device = resolve_device(manifest.run.device)
    embeddings = (
        sentence_embeddings(config, sentences, device=device)[0] if criteria.needs_encoder and sentences else None
    )
    backend = pair_metrics_backend(TextFeatures.build(sentences), embeddings, device)
    funnel = Funnel(criteria)
    parts: dict[str, list] = {name: [] for name in (*CRITERIA, "kept", "failed")}
    for lo in range(0, max(table.num_rows, 1), config.pairs_per_chunk):
        part = slice(lo, lo + config.pairs_per_chunk)
        scored = score_pairs(backend, criteria, first[part], second[part], cosine_for_all=True)
        funnel.add(scored)
        everything = np.arange(len(scored))
        for name, column in metric_columns(scored, everything).items():
            parts[name].append(column)
        parts["kept"].append(pa.array(scored.kept))
        failed = np.asarray(CRITERIA, object)[scored.first_failed]
        parts["failed"].append(pa.array(np.where(scored.kept, None, failed), pa.string()))
    return funnel, {name: pa.chunked_array(chunks) for name, chunks in parts.items()}
