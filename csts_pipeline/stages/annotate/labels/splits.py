"""Train/validation/test from the kept rated items (`annotate split`).

Only pairs whose high and low conditions were both kept go in, and a sentence pair (up to case, whitespace and
order) never spans two splits, so a model is never tested on sentences it was trained on."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.stats import rankdata

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.schemas import CSTS_SCHEMA
from csts_pipeline.stages.annotate.labels.sampling import hash64
from csts_pipeline.stages.annotate.layout import RATING_SCALE, SPLITS


def parse_ratios(text: str) -> tuple[float, float, float]:
    """`60:15:25` -> (0.6, 0.15, 0.25)."""
    try:
        parts = tuple(float(p) for p in text.split(":"))
    except ValueError:
        parts = ()
    if len(parts) != 3 or not all(math.isfinite(p) and p >= 0 for p in parts) or sum(parts) <= 0:
        raise UserError(f"--ratios {text!r}: expected three non-negative numbers train:validation:test, e.g. 60:15:25")
    total = sum(parts)
    return parts[0] / total, parts[1] / total, parts[2] / total


def sentence_pair_groups(sentence1: pa.ChunkedArray, sentence2: pa.ChunkedArray) -> np.ndarray:
    """A group code per row: rows share one when their two sentences are the same up to case and whitespace, in
    either order; so (s1, s2) from different pair ids and (s2, s1) fall in the same group."""

    def norm(column: pa.ChunkedArray) -> pa.ChunkedArray:
        return pc.utf8_lower(pc.utf8_trim_whitespace(pc.replace_substring_regex(column, r"\s+", " ")))

    a, b = norm(sentence1), norm(sentence2)
    first_is_a = pc.less_equal(a, b)
    key = pc.binary_join_element_wise(pc.if_else(first_is_a, a, b), pc.if_else(first_is_a, b, a), "\x00")
    return pc.dictionary_encode(pa.chunked_array(key).combine_chunks()).indices.to_numpy().astype(np.int64)


def split_sizes(groups: int, ratios: tuple[float, float, float]) -> np.ndarray:
    """Groups per split by largest remainder, so the sizes add up and follow the ratios as closely as possible."""
    target = np.array(ratios) * groups
    sizes = np.floor(target).astype(np.int64)
    sizes[np.argsort(-(target - sizes), kind="stable")[: groups - int(sizes.sum())]] += 1
    return sizes


def assign_splits(
    groups: np.ndarray, pair_ids: np.ndarray, seed: int, ratios: tuple[float, float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Split index (0 train, 1 validation, 2 test) and the group's seeded position, per row. Whole groups are
    assigned; a group's order comes from a seeded hash of its smallest pair id, not from the row order."""
    n_groups = int(groups.max()) + 1
    smallest = np.full(n_groups, np.iinfo(np.int64).max)
    np.minimum.at(smallest, groups, pair_ids)
    order = np.argsort(hash64(smallest, seed), kind="stable")
    position = np.empty(n_groups, np.int64)
    position[order] = np.arange(n_groups)
    bounds = np.cumsum(split_sizes(n_groups, ratios))
    group_split = np.searchsorted(bounds, position, side="right")
    return group_split[groups], position[groups]


def _condition_types(table: pa.Table) -> np.ndarray:
    return table.column("condition_type").to_numpy(zero_copy_only=False)


def complete_pairs(kept: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """The kept items of pairs with both conditions kept, and those pair ids; a pair with only one condition
    cannot teach a model that the condition changes the similarity."""
    pair_ids = kept.column("pair_id").to_numpy()
    types = _condition_types(kept)
    complete_ids = np.intersect1d(pair_ids[types == "high"], pair_ids[types == "low"])
    return kept.filter(pa.array(np.isin(pair_ids, complete_ids))), complete_ids


def csts_table(complete: pa.Table, seed: int, ratios: tuple[float, float, float]) -> tuple[pa.Table, int]:
    """The complete items in the C-STS schema with their split, ordered by split, then the seeded group order,
    pair and high before low; and the number of sentence pairs (groups)."""
    groups = sentence_pair_groups(complete.column("sentence1"), complete.column("sentence2"))
    pair_ids = complete.column("pair_id").to_numpy()
    split_index, position = assign_splits(groups, pair_ids, seed, ratios)
    is_low = _condition_types(complete) == "low"
    order = np.lexsort((is_low, pair_ids, position, split_index))
    table = complete.take(pa.array(order))
    names = np.array(SPLITS, dtype=object)[split_index[order]]
    columns = {name: table.column(name) for name in CSTS_SCHEMA.names if name != "split"}
    table = pa.table({**columns, "split": pa.array(names, pa.string())}, schema=CSTS_SCHEMA)
    return table, int(groups.max()) + 1


def spread_as_answers(labels: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """The labels' order with the spread of the people's own answers: each label goes to the quantile at its
    mid-rank of the answers' distribution, an answer v read as uniform over the half points around it (1-1.5,
    1.5-2.5, .., 4.5-5), so distinct labels stay distinct and tied ones tied. A posterior mean sits nearer the
    middle of the scale the less its item's answers say: as a regression target it compresses the scale."""
    if len(labels) == 0:
        return np.asarray(labels, float)
    low, high = RATING_SCALE
    counts = np.bincount(np.rint(answers).astype(np.int64) - low, minlength=high - low + 1)
    edges = np.concatenate([[low], np.arange(low, high) + 0.5, [high]])
    cumulative = np.concatenate([[0.0], np.cumsum(counts) / counts.sum()])
    keep = np.concatenate([[True], np.diff(cumulative) > 0])  # an answer nobody gave spans no quantiles
    position = (rankdata(labels, method="average") - 0.5) / len(labels)
    return np.interp(position, cumulative[keep], edges[keep])


def label_description(labels: str, upstream_params: dict[str, Any], *, spread: str = "import") -> dict[str, Any]:
    """What the labels are, for the split's record and its Parquet metadata: the scale (always the C-STS 1-5,
    so `train` never infers it from the labels seen) and how they were made."""
    low, high = RATING_SCALE
    if labels == "bws":
        how = "Best-Worst Scaling counting scores (best - worst) / seen in [-1, 1], mapped linearly to 1-5"
        return {"source": "bws", "scale": [low, high], "policy": "1 + 4 * (score + 1) / 2", "description": how}
    policy = upstream_params.get("aggregate", "mean")
    how = f"{policy} of the 1-5 Likert ratings" + (" (median rounded to an integer)" if policy == "round" else "")
    if policy == "model":
        how = "posterior mean of an ordinal rater model (worker bias and noise) fitted to the 1-5 Likert ratings"
    if spread == "answers":
        how += "; in that order, given the values of the people's own 1-5 answers (quantile-matched)"
    return {"source": "likert", "scale": [low, high], "policy": policy, "spread": spread, "description": how}


def label_metadata(described: dict[str, Any]) -> dict[bytes, bytes]:
    """The Parquet schema metadata of a C-STS split: `csts.label_range` ("1 5") and `csts.labels` (JSON)."""
    low, high = described["scale"]
    return {b"csts.label_range": f"{low} {high}".encode(), b"csts.labels": json.dumps(described).encode()}
