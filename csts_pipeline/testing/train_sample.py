"""A generated C-STS-format set for tests, the benchmark's smoke run and trying `train`/`evaluate` without the
authors' data (which they distribute on request). Never a substitute for it: it only shows the mechanics.

Each sentence describes an animal by colour, kind, action and place; the two sentences of a pair agree on some
of these and differ on others. Each pair appears twice, as in C-STS: once under a condition naming an attribute
they share (label 4-5) and once under one naming an attribute they differ on (label 1-2), so the label follows
from the condition and the sentences: a signal a model can learn.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from csts_pipeline.pipeline.shards import write_table

_ATTRIBUTES = {
    "colour": ["black", "white", "brown", "grey", "golden", "spotted"],
    "kind": ["dog", "cat", "horse", "goat", "rabbit", "fox"],
    "action": ["sleeping", "running", "eating", "jumping", "drinking", "sitting"],
    "place": ["on the beach", "in a garden", "near a river", "in the snow", "on a street", "in a barn"],
}
_CONDITIONS = {
    "colour": "The colour of the animal.",
    "kind": "The kind of animal.",
    "action": "What the animal is doing.",
    "place": "Where the animal is.",
}


def _sentence(values: dict[str, str]) -> str:
    return f"A {values['colour']} {values['kind']} is {values['action']} {values['place']}."


def sample_rows(n_pairs: int, seed: int = 0) -> list[dict]:
    """2 * n_pairs rows (sentence1, sentence2, condition, label, condition_type), each pair's rows adjacent,
    high-similarity condition first."""
    rng = random.Random(seed)
    rows: list[dict] = []
    seen: set[tuple[str, str]] = set()
    while len(rows) < 2 * n_pairs:
        first = {name: rng.choice(options) for name, options in _ATTRIBUTES.items()}
        shared = rng.sample(sorted(_ATTRIBUTES), rng.randint(1, 3))
        second = {
            name: first[name] if name in shared else rng.choice([v for v in options if v != first[name]])
            for name, options in _ATTRIBUTES.items()
        }
        pair = (_sentence(first), _sentence(second))
        if pair in seen:
            continue
        seen.add(pair)
        high = rng.choice(shared)
        low = rng.choice([name for name in _ATTRIBUTES if name not in shared])
        rows.append({"sentence1": pair[0], "sentence2": pair[1], "condition": _CONDITIONS[high],
                     "label": float(rng.choice([4, 5])), "condition_type": "high"})  # fmt: skip
        rows.append({"sentence1": pair[0], "sentence2": pair[1], "condition": _CONDITIONS[low],
                     "label": float(rng.choice([1, 2])), "condition_type": "low"})  # fmt: skip
    return rows


def write_sample_csv(path: Path, n_pairs: int, seed: int = 0) -> Path:
    """The authors' CSV layout: sentence1, sentence2, condition, label."""
    rows = sample_rows(n_pairs, seed)
    table = pa.table({name: [row[name] for row in rows] for name in ("sentence1", "sentence2", "condition", "label")})
    path.parent.mkdir(parents=True, exist_ok=True)
    pacsv.write_csv(table, path)
    return path


def write_sample_splits(folder: Path, n_pairs: dict[str, int], seed: int = 0) -> dict[str, Path]:
    """One CSV per split, `csts_<split>.csv`, as the authors ship theirs."""
    return {
        split: write_sample_csv(folder / f"csts_{split}.csv", count, seed + index)
        for index, (split, count) in enumerate(n_pairs.items())
    }


def write_sample_parquet(path: Path, n_pairs: dict[str, int], seed: int = 0) -> Path:
    """One Parquet file with every split and the optional `condition_type` and `split` columns."""
    rows = []
    for index, (split, count) in enumerate(n_pairs.items()):
        rows.extend({**row, "split": split} for row in sample_rows(count, seed + index))
    write_table(pa.Table.from_pylist(rows), path)
    return path
