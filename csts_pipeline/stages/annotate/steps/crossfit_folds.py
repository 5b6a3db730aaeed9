"""The folds of `annotate crossfit` (steps/crossfit.py): which items share a fold, and one fold's model trained
with `train`'s own code on the other folds' labels and scoring its own fold.

Why groups, not items: a model that learnt one condition of a pair, or the same two sentences under another
pair id, has seen most of what the held-out item says; its score would agree with the label by memory, not by
skill. So every item is joined to the items of its pair and to those of its sentence pair (a union of both keys),
and each group goes whole to one fold.

A fold's files live in the crossfit's staging folder (`folds/fold-<k>/`): the training rows, the held-out rows,
the train output while it runs (train's own checkpoint resumes a killed epoch) and, once it has scored its fold,
`scores.parquet` and `fold.json` with the fingerprint of what it learnt. A rerun finds a fold whose `fold.json`
holds the same fingerprint finished, and trains only the others; the trained weights go once the fold has scored,
so the committed folder keeps answers, not five models."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.manifest import TrainConfig
from csts_pipeline.pipeline.records import fingerprint, read_json, write_json
from csts_pipeline.pipeline.shards import read_table
from csts_pipeline.stages.annotate.crowd.files import write_parquet
from csts_pipeline.stages.annotate.labels.sampling import hash64

FOLDS = "folds"
FOLD_RECORD = "fold.json"
FOLD_SCORES = "scores.parquet"
TEXT = ("sentence1", "sentence2", "condition")


def sentence_pair_key(item: dict[str, Any]) -> tuple[str, str]:
    """The two sentences, whitespace and case folded, in either order: the same pair of sentences."""
    one, two = (" ".join(str(item[name]).split()).casefold() for name in ("sentence1", "sentence2"))
    return (one, two) if one <= two else (two, one)


def groups_of(items: list[dict[str, Any]]) -> np.ndarray:
    """A group number per item: items sharing a pair id or a sentence pair are in one group (union-find)."""
    parent = list(range(len(items)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[Any, int] = {}
    for i, item in enumerate(items):
        for key in (("pair", item.get("pair_id")), ("sentences", sentence_pair_key(item))):
            if key[1] is None:
                continue
            j = first.setdefault(key, i)
            parent[root(i)] = root(j)
    roots = np.array([root(i) for i in range(len(items))])
    return np.unique(roots, return_inverse=True)[1]


def assign_folds(items: list[dict[str, Any]], folds: int, seed: int) -> np.ndarray:
    """A fold 0..folds-1 per item, whole groups at a time: groups in a seeded order, each into the fold with the
    fewest items so far (the folds come out even within a group's size)."""
    group = groups_of(items)
    sizes = np.bincount(group)
    order = np.argsort(hash64(np.arange(len(sizes)), seed), kind="stable")
    fold_of_group = np.empty(len(sizes), np.int64)
    filled = np.zeros(folds, np.int64)
    for g in order:
        k = int(np.argmin(filled))
        fold_of_group[g] = k
        filled[k] += sizes[g]
    return fold_of_group[group]


@dataclass(frozen=True, kw_only=True)
class FoldJob:
    """One fold: the rows it trains on (the other folds' labelled items), the items it rates, where it works."""

    index: int
    folder: Path
    train_rows: pa.Table  # item_id, the three texts, pair_id and label: what the fold learns
    held_out: list[dict[str, Any]]  # item_id and the three texts
    config: TrainConfig
    device: str

    @property
    def fingerprint(self) -> str:
        """What the fold's answers depend on: its training rows, its held-out items and the training settings."""
        rows = fingerprint(self.train_rows.to_pylist())
        held = fingerprint([[item["item_id"], *(item[name] for name in TEXT)] for item in self.held_out])
        return fingerprint({"train": rows, "held_out": held, "config": self.config.model_dump()})

    def finished(self) -> dict[str, Any] | None:
        """The fold's record when a run before this one finished it with the same fingerprint."""
        path = self.folder / FOLD_RECORD
        if not (path.is_file() and (self.folder / FOLD_SCORES).is_file()):
            return None
        try:
            record = read_json(path)
        except Exception:
            return None
        return record if record.get("fingerprint") == self.fingerprint else None


def run_fold(job: FoldJob) -> dict[str, Any]:
    """Train on the other folds with `train`'s own code (the held-out rows as its unlabelled test split, so train
    scores them too), keep the held-out scores and the timings, and drop the weights. A train run a kill cut
    resumes from its own checkpoint (train's fingerprint is the same rows and settings, or it starts afresh)."""
    from csts_pipeline.stages.train import train as train_stage

    done = job.finished()
    if done is not None:
        return done | {"resumed": True}
    job.folder.mkdir(parents=True, exist_ok=True)
    (job.folder / FOLD_RECORD).unlink(missing_ok=True)
    write_parquet(job.train_rows, job.folder / "train.parquet")
    held = {name: [item[name] for item in job.held_out] for name in TEXT}
    held_table = pa.table({**held, "label": pa.nulls(len(job.held_out), pa.float64())})
    write_parquet(held_table, job.folder / "held_out.parquet")
    started = time.perf_counter()
    options = train_stage.TrainOptions(
        train=job.folder / "train.parquet",
        test=job.folder / "held_out.parquet",
        out=job.folder / "train",
        config=job.config,
        device=job.device,
    )
    trained = train_stage.run(options)
    scores = read_table(job.folder / "train" / "predictions_test.parquet").column("score").to_numpy()
    ids = [item["item_id"] for item in job.held_out]
    write_parquet(pa.table({"item_id": ids, "score": scores.astype(np.float64)}), job.folder / FOLD_SCORES)
    record = {
        "fold": job.index,
        "fingerprint": job.fingerprint,
        "train_rows": job.train_rows.num_rows,
        "held_out": len(ids),
        "train_seconds": trained.get("train_seconds"),
        "seconds": round(time.perf_counter() - started, 3),
        "device": trained.get("device"),
    }
    shutil.rmtree(job.folder / "train")  # the weights: the answers are what the folder keeps
    write_json(job.folder / FOLD_RECORD, record)
    return record | {"resumed": False}


def fold_scores(folder: Path) -> pa.Table:
    """A finished fold's held-out scores (item_id, score)."""
    return read_table(folder / FOLD_SCORES)
