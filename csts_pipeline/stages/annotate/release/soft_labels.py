"""Soft labels for the published dataset: every individual rating under a pseudonymous worker id, and each item's
distribution over 1-5 when the labels came from the ordinal model (`csts-pipeline export`, steps.publish).

A worker id is replaced by `w-` and 16 hex digits of a keyed BLAKE2b hash of the id, keyed by a salt kept in the
annotate folder (`publish_salt.txt`, made on the first export, never published): exports of the same dataset
give the same pseudonyms, so a worker's ratings stay linked across its files, while the same worker in another
dataset (another salt) gets another pseudonym and nobody without the salt can test a guessed worker id."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from csts_pipeline.pipeline.schemas import PUBLISHED_RATINGS
from csts_pipeline.pipeline.shards import read_table, write_atomic
from csts_pipeline.stages.annotate.labels.agreement import MODEL_WORKER
from csts_pipeline.stages.annotate.layout import INDIVIDUAL_RATINGS, ITEMS, RATINGS, rating_item_id

SALT = "publish_salt.txt"
ANNOTATIONS = "annotations"  # the dataset folder's subfolder for these files
RATINGS_FILE = "ratings.parquet"
DISTRIBUTIONS_FILE = "distributions.parquet"
DISTRIBUTION_COLUMNS = ("label", "distribution", "interval_low", "interval_high", "p_not_pertinent")


def salt_of(annotate_dir: Path) -> bytes:
    """The dataset's salt, made (32 random bytes, hex) and kept the first time it is needed."""
    path = annotate_dir / SALT
    if not path.is_file():
        token = secrets.token_hex(32) + "\n"
        write_atomic(path, lambda handle: handle.write(token.encode()))
    return bytes.fromhex(path.read_text().strip())


def pseudonyms(worker_ids: list[str], salt: bytes) -> list[str]:
    """`w-` and 16 hex digits of BLAKE2b(worker id, key=salt); one hash per distinct id. A language model's id
    (`model:<name>`) names no person and stays as it is."""
    known = {
        w: w if w.startswith(MODEL_WORKER) else "w-" + hashlib.blake2b(w.encode(), key=salt, digest_size=8).hexdigest()
        for w in dict.fromkeys(worker_ids)
    }
    return [known[w] for w in worker_ids]


def published_items(tables: dict[str, pa.Table]) -> set[str]:
    """The rating item ids of the published rows (pair id and condition type name them)."""
    ids = set()
    for table in tables.values():
        pairs = table.column("pair_id").to_pylist()
        kinds = table.column("condition_type").to_pylist()
        ids.update(rating_item_id(p, k) for p, k in zip(pairs, kinds))
    return ids


def soft_label_tables(annotate_dir: Path, tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The individual ratings of the published items (pseudonymous workers) and, with model labels, their
    distributions; empty when the ratings import's files are not there (a BWS dataset)."""
    ratings_dir = annotate_dir / RATINGS
    if not (ratings_dir / INDIVIDUAL_RATINGS).is_file() or not (ratings_dir / ITEMS).is_file():
        return {}
    wanted = pa.array(sorted(published_items(tables)))
    items = read_table(ratings_dir / ITEMS)
    items = items.filter(pc.is_in(items.column("item_id"), wanted)).sort_by("item_id")
    ratings = read_table(ratings_dir / INDIVIDUAL_RATINGS)
    ratings = ratings.filter(pc.is_in(ratings.column("item_id"), wanted))
    at = pc.index_in(ratings.column("item_id"), items.column("item_id")).to_numpy(zero_copy_only=False)
    workers = pseudonyms(ratings.column("worker_id").to_pylist(), salt_of(annotate_dir))
    published = pa.table(
        {
            "item_id": ratings.column("item_id"),
            "pair_id": items.column("pair_id").take(pa.array(at)),
            "condition_type": items.column("condition_type").take(pa.array(at)),
            "worker": workers,
            "rating": ratings.column("rating"),
            "not_pertinent": ratings.column("not_pertinent"),
            **{name: _column_or_nulls(ratings, name) for name in ("distribution", "p_not_pertinent")},
        },
        schema=PUBLISHED_RATINGS,
    )
    order = np.lexsort((np.array(workers), ratings.column("item_id").to_numpy(zero_copy_only=False)))
    found = {RATINGS_FILE: published.take(pa.array(order))}
    if "distribution" in items.column_names and items.column("distribution").null_count < items.num_rows:
        found[DISTRIBUTIONS_FILE] = items.select(["item_id", "pair_id", "condition_type", *DISTRIBUTION_COLUMNS])
    return found


def _column_or_nulls(table: pa.Table, name: str) -> pa.Array:
    """The column, or nulls of its published type for a ratings table written before the model columns."""
    kind = PUBLISHED_RATINGS.field(name).type
    if name in table.column_names:
        return table.column(name).cast(kind)
    return pa.nulls(table.num_rows, kind)
